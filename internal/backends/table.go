package backends

// Table is every backend svcproxy runs, one row each. Its order is the
// order in which leftovers are removed: IPVS mode's chains share names
// with iptables mode's (KUBE-SERVICES, KUBE-MARK-MASQ, KUBE-POSTROUTING,
// KUBE-PROXY-FIREWALL, …) and its own chains jump to them, so iptables
// mode's cleanup, which knows only its own chains, cannot delete those
// while IPVS mode's are there, and the kernel refuses its whole restore;
// IPVS mode's cleanup removes all of its chains, the shared names included.
// ebpf mode's pins share nothing with any table; their place is free.
var Table = Registry{
	nftablesBackend,
	ebpfBackend,
	ipvsBackend,
	iptablesBackend,
}
