package app

import (
	"fmt"
	"strings"

	"github.com/spf13/pflag"
	cliflag "k8s.io/component-base/cli/flag"
	logsapi "k8s.io/component-base/logs/api/v1"
	"k8s.io/kube-proxy/config/v1alpha1"

	"github.com/svcproxy/svcproxy/internal/config"
)

// ignoredWithConfig is appended to the help of flags that a config file
// overrides, as upstream does.
const ignoredWithConfig = " This parameter is ignored if a config file is specified by --config."

// addFlags registers kube-proxy's Linux flags (contract §1.2) with upstream's
// names and defaults, plus svcproxy's --service-proxy-name, --state-socket and
// --watch-node-addresses.
func (o *options) addFlags(fs *pflag.FlagSet) {
	fs.SetNormalizeFunc(cliflag.WordSepNormalizeFunc)
	o.addGeneralFlags(fs)
	o.addNetworkFlags(fs)
	o.addSyncFlags(fs)
	o.addIPVSFlags(fs)
	o.addConntrackFlags(fs)
	o.addDeprecatedFlags(fs)
	addRemovedFlags(fs)
	logsapi.AddFlags(&o.flagConfig.Logging, fs)
}

func (o *options) addGeneralFlags(fs *pflag.FlagSet) {
	c := o.flagConfig
	fs.StringVar(&o.configFile, "config", o.configFile, "The path to the configuration file.")
	fs.StringVar(&o.writeConfigTo, "write-config-to", o.writeConfigTo, "If set, write the default configuration values to this file and exit.")
	fs.BoolVar(&o.cleanupAndExit, "cleanup", o.cleanupAndExit, "If true cleanup iptables and ipvs rules and exit.")
	fs.BoolVar(&o.initAndExit, "init-only", o.initAndExit, "If true, perform any initialization steps that must be done with full root privileges, and then exit. After doing this, you can run kube-proxy again with only the CAP_NET_ADMIN capability.")
	fs.StringVar(&o.master, "master", o.master, "The address of the Kubernetes API server (overrides any value in kubeconfig)")
	fs.StringVar(&c.ClientConnection.Kubeconfig, "kubeconfig", c.ClientConnection.Kubeconfig, "Path to kubeconfig file with authorization information (the master location can be overridden by the master flag).")
	fs.StringVar(&c.ClientConnection.ContentType, "kube-api-content-type", c.ClientConnection.ContentType, "Content type of requests sent to apiserver.")
	fs.Float32Var(&c.ClientConnection.QPS, "kube-api-qps", c.ClientConnection.QPS, "QPS to use while talking with kubernetes apiserver")
	fs.Int32Var(&c.ClientConnection.Burst, "kube-api-burst", c.ClientConnection.Burst, "Burst to use while talking with kubernetes apiserver")
	fs.StringVar(&o.hostnameOverride, "hostname-override", o.hostnameOverride, "If non-empty, will be used as the name of the Node that kube-proxy is running on. If unset, the node name is assumed to be the same as the node's hostname.")
	fs.Var(cliflag.NewMapStringBool(&c.FeatureGates), "feature-gates", "A set of key=value pairs that describe feature gates for alpha/experimental features. Options are:\n"+
		strings.Join(config.KnownFeatures(), "\n")+"\nThis parameter is ignored if a config file is specified by --config.")
	fs.Var(namedStringVar[v1alpha1.ProxyMode]{&c.Mode, "ProxyMode"}, "proxy-mode", "Which proxy mode to use: on Linux this can be 'iptables' (default), 'ipvs', or 'nftables'. On Windows the only supported value is 'kernelspace'."+ignoredWithConfig)
	fs.Int32Var(c.OOMScoreAdj, "oom-score-adj", *c.OOMScoreAdj, "The oom-score-adj value for kube-proxy process. Values must be within the range [-1000, 1000]."+ignoredWithConfig)
	fs.DurationVar(&c.ConfigSyncPeriod.Duration, "config-sync-period", c.ConfigSyncPeriod.Duration, "How often configuration from the apiserver is refreshed.  Must be greater than 0.")
	fs.BoolVar(&c.EnableProfiling, "profiling", c.EnableProfiling, "If true enables profiling via web interface on /debug/pprof handler."+ignoredWithConfig)
	fs.StringVar(&c.ShowHiddenMetricsForVersion, "show-hidden-metrics-for-version", c.ShowHiddenMetricsForVersion, "The previous version for which you want to show hidden metrics. Only the previous minor version is meaningful, other values will not be allowed. The format is <major>.<minor>, e.g.: '1.16'. The purpose of this format is make sure you have the opportunity to notice if the next release hides additional metrics, rather than being surprised when they are permanently removed in the release after that."+ignoredWithConfig)
	fs.StringVar(&o.serviceProxyName, "service-proxy-name", o.serviceProxyName, "svcproxy extension: if set, handle only Services labelled service.kubernetes.io/service-proxy-name=<value> (kube-proxy handles only Services without that label). Applies with --config too.")
	fs.StringVar(&o.stateSocket, "state-socket", o.stateSocket, "svcproxy extension: the unix socket on which svcproxy serves its programmed state (every Service and endpoint) to 'svcproxy explain' on the node. It is created with mode 0600, its directory with 0700 if missing; empty serves none. Applies with --config too.")
	fs.BoolVar(&o.watchNodeAddrs, "watch-node-addresses", o.watchNodeAddrs, "svcproxy extension: if true, watch every Node (keeping only its addresses) and refuse an externalIP or load-balancer IP equal to any Node's address, not only this node's. Every proxy then receives every Node's status updates. Applies with --config too.")
	fs.StringVar(&o.externalLBAlgorithm, "external-lb-algorithm", o.externalLBAlgorithm, "svcproxy extension: how traffic from outside the node to node ports, external IPs and load-balancer IPs picks an endpoint, for Services without the annotation svcproxy.io/external-lb-algorithm: 'random' or 'maglev' (consistent hashing, the same endpoint for a flow on every node). Only ebpf mode's experimental tc programs (--bpf-tc-interfaces: IPv4 TCP and UDP) act on 'maglev'; everywhere else every mode balances at random, and 'svcproxy explain' shows the decision. Applies with --config too.")
	o.addEBPFFlags(fs)
	addVersionFlag(fs, &o.version)
}

// addDSRFlags registers the flags of direct server return (docs/user/dsr.md).
func (o *options) addDSRFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.externalForwarding, "external-forwarding", o.externalForwarding, "svcproxy extension: how traffic from outside the node to node ports, external IPs and load-balancer IPs of an externalTrafficPolicy: Cluster Service reaches an endpoint on another node, for Services without the annotation svcproxy.io/external-forwarding: 'snat' (masqueraded to this node's address, as kube-proxy does) or 'dsr' (direct server return: tunnelled to the endpoint's node, which answers the client itself). Every mode accepts it; only ebpf mode's tc programs with --bpf-dsr tunnel, to nodes that advertise DSR too, and everything else is masqueraded. Applies with --config too.")
	fs.BoolVar(&o.bpfDSR, "bpf-dsr", o.bpfDSR, "svcproxy extension, experimental: with --proxy-mode=ebpf and --bpf-tc-interfaces, the tc programs do direct server return for the Services that ask for it (--external-forwarding, svcproxy.io/external-forwarding): they tunnel such traffic to the endpoint's node when that node advertises DSR, and decapsulate what other nodes tunnel here. The node advertises with a Lease named after it in --bpf-dsr-namespace once its programs have synced, and every proxy then watches every Node. A start without it withdraws that Lease first. Applies with --config too.")
	fs.StringVar(&o.bpfDSRNamespace, "bpf-dsr-namespace", o.bpfDSRNamespace, "svcproxy extension: the namespace of the nodes' DSR Leases (deploy/components/dsr creates it and the Role to write them). Applies with --config too.")
}

// addEBPFFlags registers the extension flags of svcproxy's ebpf mode.
func (o *options) addEBPFFlags(fs *pflag.FlagSet) {
	o.addDSRFlags(fs)
	fs.StringVar(&o.bpfCgroupRoot, "bpf-cgroup-root", o.bpfCgroupRoot, "svcproxy extension: with --proxy-mode=ebpf (svcproxy's connect-time load balancing), the cgroup v2 directory whose processes' sockets are load-balanced when they connect (every process in it or below it). Empty means the host's cgroup v2 root, from /proc/self/mountinfo; on a host without a cgroup v2 mount, svcproxy mounts one under /run/svcproxy. Applies with --config too.")
	fs.StringVar(&o.bpfPinDir, "bpf-pin-dir", o.bpfPinDir, "svcproxy extension: in ebpf mode, the directory on a bpffs where the programs' links and maps are pinned, so that a restart adopts them. Empty means /sys/fs/bpf/svcproxy (svcproxy mounts a bpffs at /sys/fs/bpf if none is there). The other modes' start and --cleanup remove ebpf mode's pins from this directory. Applies with --config too.")
	fs.StringSliceVar(&o.bpfTCInterfaces, "bpf-tc-interfaces", o.bpfTCInterfaces, "svcproxy extension, experimental: with --proxy-mode=ebpf, the node's interfaces (comma-separated) on which tc programs translate IPv4 and IPv6 TCP and UDP packets from outside the node to node ports, external IPs and load-balancer IPs (with their source ranges and ClientIP affinity); the node then has no nftables Service rules, and nothing translates what the programs do not (SCTP, IP fragments, traffic on other interfaces, cluster IPs from outside the node). Empty (the default) leaves that traffic to the nftables rules. Applies with --config too.")
	fs.StringVar(&o.bpfAcceleration, "bpf-acceleration", o.bpfAcceleration, "svcproxy extension, experimental: with --bpf-tc-interfaces, an XDP program in front of the tc programs sends on the packets of flows they forward to endpoints on other nodes, before the kernel allocates a socket buffer for them: 'disabled' (the default), 'native' (on every --bpf-tc-interfaces interface; a driver without native XDP fails the start) or 'best-effort' (where the driver has native XDP; the others are served by tc alone). A start without it detaches the XDP programs. Applies with --config too.")
	fs.Uint32Var(&o.bpfSocketEntries, "bpf-socket-entries", o.bpfSocketEntries, "svcproxy extension: in ebpf mode, how many translated sockets per IP family are remembered, for UDP replies and getpeername to show the Service's address and for destroying connected UDP sockets whose endpoint went away. Past it the least recently used are forgotten: such a socket's UDP replies and getpeername show the endpoint's address, and it is not destroyed. 0 means 65536. A change applies at the next start, keeping what was remembered. Applies with --config too.")
}

func (o *options) addNetworkFlags(fs *pflag.FlagSet) {
	c := o.flagConfig
	fs.Var(ipVar{&c.BindAddress}, "bind-address", "Overrides kube-proxy's idea of what its node's primary IP is. Note that the name is a historical artifact, and kube-proxy does not actually bind any sockets to this IP."+ignoredWithConfig)
	fs.BoolVar(&c.BindAddressHardFail, "bind-address-hard-fail", c.BindAddressHardFail, "If true kube-proxy will treat failure to bind to a port as fatal and exit")
	fs.Var(ipPortVar{&c.HealthzBindAddress}, "healthz-bind-address", "The IP address and port for the health check server to serve on, defaulting to \"0.0.0.0:10256\"."+ignoredWithConfig)
	fs.Var(ipPortVar{&c.MetricsBindAddress}, "metrics-bind-address", "The IP address and port for the metrics server to serve on, defaulting to \"127.0.0.1:10249\". (Set to \"0.0.0.0:10249\" / \"[::]:10249\" to bind on all interfaces.)"+ignoredWithConfig)
	fs.Var(namedStringVar[v1alpha1.LocalMode]{&c.DetectLocalMode, "LocalMode"}, "detect-local-mode", "Mode to use to detect local traffic."+ignoredWithConfig)
	fs.StringVar(&c.ClusterCIDR, "cluster-cidr", c.ClusterCIDR, "The CIDR range of the pods in the cluster. (For dual-stack clusters, this can be a comma-separated dual-stack pair of CIDR ranges.). When --detect-local-mode is set to ClusterCIDR, kube-proxy will consider traffic to be local if its source IP is in this range. (Otherwise it is not used.)"+ignoredWithConfig)
	fs.StringVar(&c.DetectLocal.BridgeInterface, "pod-bridge-interface", c.DetectLocal.BridgeInterface, "A bridge interface name. When --detect-local-mode is set to BridgeInterface, kube-proxy will consider traffic to be local if it originates from this bridge.")
	fs.StringVar(&c.DetectLocal.InterfaceNamePrefix, "pod-interface-name-prefix", c.DetectLocal.InterfaceNamePrefix, "An interface name prefix. When --detect-local-mode is set to InterfaceNamePrefix, kube-proxy will consider traffic to be local if it originates from any interface whose name begins with this prefix.")
	fs.StringSliceVar(&c.NodePortAddresses, "nodeport-addresses", c.NodePortAddresses, "A list of CIDR ranges and/or keywords that expand to CIDR ranges. NodePort services are only accessible on node IPs covered by the list. Supported keywords: 'primary' (the Node object's primary IPv4 and/or IPv6 addresses), 'localhost' (127.0.0.0/8 and ::1/128), and 'all' (0.0.0.0/0 and ::/0). Any combination of valid keywords and CIDRS may be included in the list. Serving NodePorts on loopback IPs is only supported in iptables mode (IPv4 only, see --iptables-localhost-nodeports), and, only for TCP, in nftables mode when the KubeProxyNFTablesLocalhostNodePorts feature gate is enabled and the list explicitly includes loopback (e.g. 'localhost'). If unset, this defaults to 'all' in iptables and ipvs mode, and to 'primary' in nftables mode."+ignoredWithConfig)
}

func (o *options) addSyncFlags(fs *pflag.FlagSet) {
	c := o.flagConfig
	fs.BoolVar(&o.masqueradeAll, "masquerade-all", o.masqueradeAll, "SNAT all traffic sent via Service cluster IPs. This may be required with some CNI plugins. Only supported on Linux.")
	fs.Int32Var(c.IPTables.MasqueradeBit, "iptables-masquerade-bit", *c.IPTables.MasqueradeBit, "If using the iptables or ipvs proxy mode, the bit of the fwmark space to mark packets requiring SNAT with.  Must be within the range [0, 31].")
	fs.BoolVar(c.IPTables.LocalhostNodePorts, "iptables-localhost-nodeports", *c.IPTables.LocalhostNodePorts, "If false, kube-proxy will disable the legacy behavior of allowing NodePort services to be accessed via localhost. (Applies only to iptables mode and IPv4; localhost NodePorts are never allowed with other proxy modes or with IPv6.)")
	fs.DurationVar(&o.iptablesSyncPeriod, "iptables-sync-period", o.iptablesSyncPeriod, "An interval (e.g. '5s', '1m', '2h22m') indicating how frequently various re-synchronizing and cleanup operations are performed. Must be greater than 0.")
	fs.DurationVar(&o.iptablesMinSyncPeriod, "iptables-min-sync-period", o.iptablesMinSyncPeriod, "The minimum period between iptables rule resyncs (e.g. '5s', '1m', '2h22m'). A value of 0 means every Service or EndpointSlice change will result in an immediate iptables resync.")
}

func (o *options) addIPVSFlags(fs *pflag.FlagSet) {
	c := &o.flagConfig.IPVS
	fs.DurationVar(&o.ipvsSyncPeriod, "ipvs-sync-period", o.ipvsSyncPeriod, "An interval (e.g. '5s', '1m', '2h22m') indicating how frequently various re-synchronizing and cleanup operations are performed. Must be greater than 0.")
	fs.DurationVar(&o.ipvsMinSyncPeriod, "ipvs-min-sync-period", o.ipvsMinSyncPeriod, "The minimum period between IPVS rule resyncs (e.g. '5s', '1m', '2h22m'). A value of 0 means every Service or EndpointSlice change will result in an immediate IPVS resync.")
	fs.StringVar(&c.Scheduler, "ipvs-scheduler", c.Scheduler, "The ipvs scheduler type when proxy mode is ipvs")
	fs.StringSliceVar(&c.ExcludeCIDRs, "ipvs-exclude-cidrs", c.ExcludeCIDRs, "A comma-separated list of CIDRs which the ipvs proxier should not touch when cleaning up IPVS rules.")
	fs.BoolVar(&c.StrictARP, "ipvs-strict-arp", c.StrictARP, "Enable strict ARP by setting arp_ignore to 1 and arp_announce to 2")
	fs.DurationVar(&c.TCPTimeout.Duration, "ipvs-tcp-timeout", c.TCPTimeout.Duration, "The timeout for idle IPVS TCP connections, 0 to leave as-is. (e.g. '5s', '1m', '2h22m').")
	fs.DurationVar(&c.TCPFinTimeout.Duration, "ipvs-tcpfin-timeout", c.TCPFinTimeout.Duration, "The timeout for IPVS TCP connections after receiving a FIN packet, 0 to leave as-is. (e.g. '5s', '1m', '2h22m').")
	fs.DurationVar(&c.UDPTimeout.Duration, "ipvs-udp-timeout", c.UDPTimeout.Duration, "The timeout for IPVS UDP packets, 0 to leave as-is. (e.g. '5s', '1m', '2h22m').")
}

func (o *options) addConntrackFlags(fs *pflag.FlagSet) {
	c := &o.flagConfig.Conntrack
	fs.Int32Var(c.MaxPerCore, "conntrack-max-per-core", *c.MaxPerCore, "Maximum number of NAT connections to track per CPU core (0 to leave the limit as-is and ignore conntrack-min).")
	fs.Int32Var(c.Min, "conntrack-min", *c.Min, "Minimum number of conntrack entries to allocate, regardless of conntrack-max-per-core (set conntrack-max-per-core=0 to leave the limit as-is).")
	fs.DurationVar(&c.TCPEstablishedTimeout.Duration, "conntrack-tcp-timeout-established", c.TCPEstablishedTimeout.Duration, "Idle timeout for established TCP connections (0 to leave as-is)")
	fs.DurationVar(&c.TCPCloseWaitTimeout.Duration, "conntrack-tcp-timeout-close-wait", c.TCPCloseWaitTimeout.Duration, "NAT timeout for TCP connections in the CLOSE_WAIT state")
	fs.BoolVar(&c.TCPBeLiberal, "conntrack-tcp-be-liberal", c.TCPBeLiberal, "Enable liberal mode for tracking TCP packets by setting nf_conntrack_tcp_be_liberal to 1")
	fs.DurationVar(&c.UDPTimeout.Duration, "conntrack-udp-timeout", c.UDPTimeout.Duration, "Idle timeout for UNREPLIED UDP connections (0 to leave as-is)")
	fs.DurationVar(&c.UDPStreamTimeout.Duration, "conntrack-udp-timeout-stream", c.UDPStreamTimeout.Duration, "Idle timeout for ASSURED UDP connections (0 to leave as-is)")
}

func (o *options) addDeprecatedFlags(fs *pflag.FlagSet) {
	fs.Int32Var(&o.healthzPort, "healthz-port", o.healthzPort, "The port to bind the health check server. Use 0 to disable.")
	_ = fs.MarkDeprecated("healthz-port", "This flag is deprecated and will be removed in a future release. Please use --healthz-bind-address instead.")
	fs.Int32Var(&o.metricsPort, "metrics-port", o.metricsPort, "The port to bind the metrics server. Use 0 to disable.")
	_ = fs.MarkDeprecated("metrics-port", "This flag is deprecated and will be removed in a future release. Please use --metrics-bind-address instead.")
}

// removedFlags are flags kube-proxy dropped long ago, with what to use
// instead. Accepting them silently would hide a broken deployment.
var removedFlags = map[string]string{
	"cleanup-iptables":   "use --cleanup",
	"cleanup-ipvs":       "use --cleanup",
	"udp-timeout":        "it applied only to the removed userspace mode; use --conntrack-udp-timeout for UDP conntrack timeouts",
	"resource-container": "run svcproxy in a container and use the runtime's resource limits",
	"conntrack-max":      "use --conntrack-max-per-core and --conntrack-min",
}

// removedFlag is a flag value that refuses every value with the replacement.
type removedFlag struct{ name, hint string }

func (f removedFlag) String() string { return "" }
func (f removedFlag) Type() string   { return "removed" }
func (f removedFlag) Set(string) error {
	return fmt.Errorf("--%s was removed from kube-proxy: %s", f.name, f.hint)
}

func addRemovedFlags(fs *pflag.FlagSet) {
	for name, hint := range removedFlags {
		fs.Var(removedFlag{name: name, hint: hint}, name, "removed: "+hint)
		f := fs.Lookup(name)
		f.NoOptDefVal = "true" // so the bare boolean form reaches Set too
		f.Hidden = true
	}
}
