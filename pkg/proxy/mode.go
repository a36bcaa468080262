package proxy

// Mode is a proxy mode, spelled as kube-proxy's --proxy-mode spells it.
// Every mode name is defined here and nowhere else; what a mode is made of
// (its backend, cleanup, metrics, …) is its row in internal/backends.
type Mode string

// The Linux proxy modes.
const (
	ModeIPTables Mode = "iptables"
	ModeIPVS     Mode = "ipvs"
	ModeNFTables Mode = "nftables"
	// ModeEBPF is svcproxy's extension: connect-time load balancing by
	// cgroup socket hooks, with the nftables rules for what they cannot
	// see (pkg/pipeline/backends/ebpf).
	ModeEBPF Mode = "ebpf"
)

// Modes lists every mode the configuration accepts, in the order upstream
// names them in its validation message.
var Modes = []Mode{ModeIPTables, ModeIPVS, ModeNFTables}

// ExtensionModes lists the modes svcproxy adds to upstream's: the
// configuration accepts them, but upstream's messages do not name them.
var ExtensionModes = []Mode{ModeEBPF}

// UsesNFTablesSection reports whether m reads the nftables section of the
// configuration (sync periods, masqueradeAll, masqueradeBit, the default
// nodePortAddresses): ebpf mode runs the nftables rules beside its hooks.
func (m Mode) UsesNFTablesSection() bool { return m == ModeNFTables || m == ModeEBPF }
