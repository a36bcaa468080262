package desired

import (
	"net/netip"

	"github.com/svcproxy/svcproxy/pkg/proxy"
)

// Node is what Compute needs to know about the node it runs on.
type Node struct {
	// Name is the Node object's name; endpoints with this nodeName are local.
	Name string
	// IPs are the Node's addresses from its status (InternalIP, then
	// ExternalIP), both families, primary first.
	IPs []netip.Addr
	// Zone is the topology.kubernetes.io/zone label, "" when absent.
	Zone string
	// PodCIDRs is spec.podCIDRs (for detectLocalMode NodeCIDR).
	PodCIDRs []netip.Prefix
	// HostAddrs are the addresses configured on the host's interfaces, read
	// from the kernel; nodePortAddresses CIDRs select among them.
	HostAddrs []netip.Addr
	// ServiceCIDRs are the cluster's service IP ranges as this node sees
	// them (the ServiceCIDR objects' spec.cidrs, both families): not a
	// property of the Node, but an input that changes as rarely and that
	// every rule set may depend on.
	ServiceCIDRs []netip.Prefix
	// ClusterNodeIPs are the addresses of every Node of the cluster (each
	// Node's as IPs holds this node's), sorted, both families; empty unless
	// the daemon watches every Node (--watch-node-addresses). Like IPs they
	// are refused as external and LB frontends. Unlike IPs a change to them
	// needs no full recompute: they only decide refusals, which Compute
	// redecides when they differ from prev's (claims.go).
	ClusterNodeIPs []netip.Addr
	// Peers are the other nodes that decapsulate direct-server-return
	// tunnels, sorted by name; empty unless the daemon runs with --bpf-dsr.
	Peers []Peer
	// ClusterSources are the addresses (as single-address prefixes) and
	// pod CIDRs of every Node of the cluster, both families, sorted; empty
	// unless the daemon runs with --bpf-dsr, the only use of them
	// (State.ClusterSources).
	ClusterSources []netip.Prefix
}

// Options are the configuration inputs of Compute for one family.
type Options struct {
	Family proxy.IPFamily
	// MasqueradeBit selects the mark bit (mark = 1 << MasqueradeBit).
	MasqueradeBit int
	// MasqueradeAll masquerades all cluster-IP traffic.
	MasqueradeAll bool
	// DetectLocalMode is ClusterCIDR, NodeCIDR, BridgeInterface,
	// InterfaceNamePrefix, or "" (ClusterCIDR).
	DetectLocalMode string
	// ClusterCIDRs (both families) for ClusterCIDR mode.
	ClusterCIDRs []netip.Prefix
	// BridgeInterface and InterfaceNamePrefix for the interface modes.
	BridgeInterface     string
	InterfaceNamePrefix string
	// NodePortAddresses are CIDRs and the keywords "primary", "localhost"
	// and "all", already defaulted per mode by config (nil means all).
	NodePortAddresses []string
	// DropUnallocated drops new connections to addresses of the node's
	// ServiceCIDRs that no Service holds (upstream's nftables mode does;
	// its iptables and IPVS modes do not). Without it State.ServiceCIDRs
	// stays empty.
	DropUnallocated bool
	// Localhost is how the mode treats node ports on loopback addresses
	// (localhost.go); the zero value never serves them.
	Localhost LocalhostMode
	// BindNodePorts fills NodePortAddrs.Bound: the backend binds every
	// node-port address itself (IPVS) instead of matching "any local
	// address" in its rules.
	BindNodePorts bool
	// PortSettings is the mode's own decision per service port, nil when
	// it has none (settings.go).
	PortSettings PortSettings
	// ExternalBalancing is the node's default algorithm for external
	// traffic (--external-lb-algorithm), for the Services whose annotation
	// chooses none; BalanceDefault means BalanceRandom. Every mode gets it:
	// the decision is neutral, whatever renders it.
	ExternalBalancing proxy.Balancing
	// ExternalForwarding is the node's default forwarding of external
	// traffic to endpoints on other nodes (--external-forwarding), for the
	// Services whose annotation chooses none; ForwardDefault means
	// ForwardSNAT. Every mode gets it: the decision is neutral.
	ExternalForwarding proxy.Forwarding
	// DSR says this node's datapath tunnels and decapsulates (ebpf mode
	// with --bpf-dsr): only then does a port's ExternalForwarding dsr
	// give it a DSR. Every other mode leaves it false.
	DSR bool
}
