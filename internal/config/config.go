// Package config turns kube-proxy's configuration (a KubeProxyConfiguration
// v1alpha1 file, or the equivalent flags) into a typed Config. It is the only
// package that sees the v1alpha1 types; everything further in reads Config.
package config

import (
	"net/netip"
	"time"

	"k8s.io/component-base/featuregate"
	// The json log format, registered as upstream's main does, so that
	// logging.format: json validates.
	_ "k8s.io/component-base/logs/json/register"
	"k8s.io/kube-proxy/config/v1alpha1"

	"github.com/svcproxy/svcproxy/pkg/proxy"
)

// LocalMode says how traffic from local pods is recognised.
type LocalMode string

// The local-traffic detection modes.
const (
	LocalModeClusterCIDR         LocalMode = "ClusterCIDR"
	LocalModeNodeCIDR            LocalMode = "NodeCIDR"
	LocalModeBridgeInterface     LocalMode = "BridgeInterface"
	LocalModeInterfaceNamePrefix LocalMode = "InterfaceNamePrefix"
)

// The nodePortAddresses keywords: the node's primary IP of each family, the
// loopback ranges, and every address.
const (
	NodePortAddressesPrimary   = "primary"
	NodePortAddressesLocalhost = "localhost"
	NodePortAddressesAll       = "all"
)

// Config is the resolved, validated configuration of one svcproxy process.
// Durations are already taken from the section that matches Mode (see
// contract §2.2), so readers never need to know about v1alpha1's per-mode
// sections.
type Config struct {
	Mode proxy.Mode

	// HostnameOverride is the Node name to use; "" means the OS hostname.
	HostnameOverride string
	// BindAddress overrides the node IP when it is not unspecified; it is
	// not a socket address.
	BindAddress netip.Addr
	// HealthzBindAddress and MetricsBindAddress are "ip:port"; "" disables
	// the server.
	HealthzBindAddress  string
	MetricsBindAddress  string
	BindAddressHardFail bool
	EnableProfiling     bool
	// ShowHiddenMetricsForVersion re-enables metrics hidden in that release.
	ShowHiddenMetricsForVersion string

	// SyncPeriod and MinSyncPeriod bound how often the dataplane is synced.
	SyncPeriod    time.Duration
	MinSyncPeriod time.Duration
	// ConfigSyncPeriod is the informers' resync period.
	ConfigSyncPeriod time.Duration

	// MasqueradeBit is the bit of the packet mark used to flag traffic for
	// SNAT (the mark is 1<<MasqueradeBit).
	MasqueradeBit int
	// MasqueradeAll SNATs all traffic sent to cluster IPs.
	MasqueradeAll bool
	// LocalhostNodePorts allows node ports on 127.0.0.1 (iptables, IPv4).
	LocalhostNodePorts bool

	DetectLocalMode     LocalMode
	ClusterCIDRs        []netip.Prefix
	BridgeInterface     string
	InterfaceNamePrefix string

	// NodePortAddresses are CIDRs and/or the keyword "primary"; nil means
	// every local address. Already defaulted to ["primary"] in nftables mode.
	NodePortAddresses []string

	OOMScoreAdj int
	Conntrack   Conntrack
	IPVS        IPVS

	ClientConnection ClientConnection
	FeatureGates     map[string]bool
	// FeatureGate is upstream's gate registry with FeatureGates applied.
	FeatureGate featuregate.FeatureGate
	// ModeDefaulted is true when neither the file nor --proxy-mode set a
	// mode: upstream 1.37 then warns that the default becomes nftables.
	ModeDefaulted bool

	// ServiceProxyName, when set, restricts the watch to Services labelled
	// service.kubernetes.io/service-proxy-name=ServiceProxyName (an
	// svcproxy extension; kube-proxy watches only unlabelled Services).
	ServiceProxyName string
	// StateSocket is the unix socket of svcproxy's local API (the
	// programmed state for `svcproxy explain`), "" for none (an svcproxy
	// extension, --state-socket).
	StateSocket string
	// WatchNodeAddresses watches every Node for its addresses, which are
	// then refused as external and LB frontends like this node's own (an
	// svcproxy extension, --watch-node-addresses; upstream watches only
	// its own Node).
	WatchNodeAddresses bool
	// BPFCgroupRoot is the cgroup v2 directory ebpf mode attaches its
	// socket hooks to, "" for the host's cgroup v2 root (an svcproxy
	// extension, --bpf-cgroup-root).
	BPFCgroupRoot string
	// BPFPinDir is the bpffs directory ebpf mode pins its programs' links
	// and maps in, "" for /sys/fs/bpf/svcproxy (--bpf-pin-dir).
	BPFPinDir string
	// BPFTCInterfaces, when set, are the node's interfaces on which ebpf
	// mode's experimental tc programs translate IPv4 TCP and UDP traffic
	// from outside the node to node ports, external and LB IPs
	// (--bpf-tc-interfaces, an svcproxy extension; off by default, when
	// the nftables half serves that traffic).
	BPFTCInterfaces []string
	// BPFAcceleration is where the tc programs get an XDP program in
	// front of them: "disabled" (or ""), "native" (every interface, or
	// the start fails) or "best-effort" (where the driver allows)
	// (--bpf-acceleration, an svcproxy extension).
	BPFAcceleration string
	// BPFSocketEntries is how many translated sockets ebpf mode remembers
	// per family, 0 for 65536 (--bpf-socket-entries).
	BPFSocketEntries uint32
	// ExternalBalancing is the node's default algorithm for external
	// traffic, for Services without the annotation
	// svcproxy.io/external-lb-algorithm (an svcproxy extension,
	// --external-lb-algorithm; random unless set).
	ExternalBalancing proxy.Balancing
	// ExternalForwarding is the node's default forwarding of external
	// traffic to endpoints on other nodes, for Services without the
	// annotation svcproxy.io/external-forwarding (an svcproxy extension,
	// --external-forwarding; snat unless set). Every mode accepts it; only
	// ebpf mode's tc programs with BPFDSR tunnel.
	ExternalForwarding proxy.Forwarding
	// BPFDSR makes ebpf mode's tc programs do direct server return: this
	// node tunnels external traffic to DSR peers and decapsulates theirs,
	// and advertises so with a Lease in BPFDSRNamespace (--bpf-dsr; needs
	// --proxy-mode=ebpf and --bpf-tc-interfaces, ValidateDSR).
	BPFDSR bool
	// BPFDSRNamespace holds the nodes' DSR Leases (--bpf-dsr-namespace),
	// also where a start without BPFDSR looks for this node's Lease of an
	// earlier start, to withdraw it.
	BPFDSRNamespace string
	// Master overrides the API server URL of the kubeconfig.
	Master string
	// Kubeconfig is the kubeconfig path (clientConnection.kubeconfig);
	// together with Master empty it means in-cluster configuration.
	Kubeconfig string
	// ConfigFile is the --config path, "" when flags alone configured us.
	ConfigFile string
	// Flags are the command line's flags with their values, for /flagz.
	Flags map[string]string

	// Versioned is the defaulted v1alpha1 object the Config was built from,
	// served on /configz and written by --write-config-to.
	Versioned *v1alpha1.KubeProxyConfiguration
}

// Conntrack are the conntrack sysctls to set; zero values mean "leave the
// system's value alone".
type Conntrack struct {
	MaxPerCore            int
	Min                   int
	TCPEstablishedTimeout time.Duration
	TCPCloseWaitTimeout   time.Duration
	TCPBeLiberal          bool
	UDPTimeout            time.Duration
	UDPStreamTimeout      time.Duration
}

// IPVS holds the ipvs-mode settings.
type IPVS struct {
	// Scheduler is the IPVS scheduler; "" means round robin.
	Scheduler string
	// ExcludeCIDRs are addresses whose IPVS services are never deleted.
	ExcludeCIDRs []netip.Prefix
	StrictARP    bool
	// Timeouts for IPVS connections; zero leaves the system value.
	TCPTimeout    time.Duration
	TCPFinTimeout time.Duration
	UDPTimeout    time.Duration
}

// ClientConnection configures the connection to the API server.
type ClientConnection struct {
	Kubeconfig         string
	AcceptContentTypes string
	ContentType        string
	QPS                float32
	Burst              int32
}
