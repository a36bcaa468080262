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
)

// Modes lists every mode the configuration accepts, in the order upstream
// names them in its validation message.
var Modes = []Mode{ModeIPTables, ModeIPVS, ModeNFTables}
