package config

import (
	"fmt"
	"net"
	"strconv"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	logsapi "k8s.io/component-base/logs/api/v1"
	"k8s.io/kube-proxy/config/v1alpha1"
	netutils "k8s.io/utils/net"

	"github.com/svcproxy/svcproxy/pkg/proxy"
)

// The well-known kube-proxy ports (upstream pkg/cluster/ports).
const (
	HealthzPort = 10256
	MetricsPort = 10249
)

// Default values of §2.1 that more than one place needs.
const (
	defaultSyncPeriod       = 30 * time.Second
	defaultMinSyncPeriod    = time.Second
	defaultConfigSyncPeriod = 15 * time.Minute
	defaultMasqueradeBit    = 14
	defaultOOMScoreAdj      = -999
	defaultMaxPerCore       = 32 * 1024
	defaultConntrackMin     = 128 * 1024
	defaultTCPEstablished   = 24 * time.Hour
	defaultTCPCloseWait     = time.Hour
	defaultContentType      = "application/vnd.kubernetes.protobuf"
	defaultQPS              = 5
	defaultBurst            = 10
)

// SetDefaults fills the unset fields of obj with upstream's v1alpha1
// defaults (pkg/proxy/apis/config/v1alpha1/defaults.go). Like upstream it
// treats a zero value as unset, so an explicit "0s" period is defaulted too.
func SetDefaults(obj *v1alpha1.KubeProxyConfiguration) {
	if obj.BindAddress == "" {
		obj.BindAddress = "0.0.0.0"
	}
	healthzHost, metricsHost := defaultHosts(obj.BindAddress)
	obj.HealthzBindAddress = defaultHostPort(obj.HealthzBindAddress, healthzHost, HealthzPort)
	obj.MetricsBindAddress = defaultHostPort(obj.MetricsBindAddress, metricsHost, MetricsPort)

	setDefaultInt32(&obj.OOMScoreAdj, defaultOOMScoreAdj)
	setDefaultInt32(&obj.IPTables.MasqueradeBit, defaultMasqueradeBit)
	setDefaultInt32(&obj.NFTables.MasqueradeBit, defaultMasqueradeBit)
	if obj.IPTables.LocalhostNodePorts == nil {
		localhostNodePorts := true
		obj.IPTables.LocalhostNodePorts = &localhostNodePorts
	}
	setDefaultDuration(&obj.IPTables.SyncPeriod, defaultSyncPeriod)
	setDefaultDuration(&obj.IPTables.MinSyncPeriod, defaultMinSyncPeriod)
	// ipvs.minSyncPeriod has no default: 0s means "sync on every change".
	setDefaultDuration(&obj.IPVS.SyncPeriod, defaultSyncPeriod)
	setDefaultDuration(&obj.NFTables.SyncPeriod, defaultSyncPeriod)
	setDefaultDuration(&obj.NFTables.MinSyncPeriod, defaultMinSyncPeriod)
	setDefaultDuration(&obj.ConfigSyncPeriod, defaultConfigSyncPeriod)

	setDefaultInt32(&obj.Conntrack.MaxPerCore, defaultMaxPerCore)
	setDefaultInt32(&obj.Conntrack.Min, defaultConntrackMin)
	if obj.Conntrack.TCPEstablishedTimeout == nil {
		obj.Conntrack.TCPEstablishedTimeout = &metav1.Duration{Duration: defaultTCPEstablished}
	}
	if obj.Conntrack.TCPCloseWaitTimeout == nil {
		obj.Conntrack.TCPCloseWaitTimeout = &metav1.Duration{Duration: defaultTCPCloseWait}
	}

	if obj.ClientConnection.ContentType == "" {
		obj.ClientConnection.ContentType = defaultContentType
	}
	if obj.ClientConnection.QPS == 0 {
		obj.ClientConnection.QPS = defaultQPS
	}
	if obj.ClientConnection.Burst == 0 {
		obj.ClientConnection.Burst = defaultBurst
	}
	if obj.FeatureGates == nil {
		obj.FeatureGates = map[string]bool{}
	}
	logsapi.SetRecommendedLoggingConfiguration(&obj.Logging)
}

// ApplyPlatformDefaults applies the Linux defaults upstream sets after
// decoding (platformApplyDefaults in cmd/kube-proxy/app/server_linux.go):
// mode iptables, detectLocalMode ClusterCIDR, and nodePortAddresses
// ["primary"] in nftables mode only (and in svcproxy's ebpf mode, whose
// node ports are nftables').
func ApplyPlatformDefaults(obj *v1alpha1.KubeProxyConfiguration) {
	if obj.Mode == "" {
		obj.Mode = v1alpha1.ProxyMode(proxy.ModeIPTables)
	}
	if proxy.Mode(obj.Mode).UsesNFTablesSection() && len(obj.NodePortAddresses) == 0 {
		obj.NodePortAddresses = []string{NodePortAddressesPrimary}
	}
	if obj.DetectLocalMode == "" {
		obj.DetectLocalMode = v1alpha1.LocalMode(LocalModeClusterCIDR)
	}
}

// NewDefaulted returns a v1alpha1 object with every default applied, as a
// file containing only apiVersion and kind would produce.
func NewDefaulted() *v1alpha1.KubeProxyConfiguration {
	obj := &v1alpha1.KubeProxyConfiguration{}
	SetDefaults(obj)
	return obj
}

// defaultHosts returns the default healthz and metrics hosts: the IPv4
// wildcard and loopback for an IPv4 bindAddress, their IPv6 twins for
// anything else (including an unparsable one, as upstream does).
func defaultHosts(bindAddress string) (healthz, metrics string) {
	if netutils.ParseIPSloppy(bindAddress).To4() != nil {
		return "0.0.0.0", "127.0.0.1"
	}
	return "[::]", "[::1]"
}

// defaultHostPort returns defaultHost:port for an empty address, and appends
// port to an address that is a bare IP (AppendPortIfNeeded upstream).
func defaultHostPort(addr, defaultHost string, port int) string {
	if addr == "" {
		return fmt.Sprintf("%s:%d", defaultHost, port)
	}
	return AppendPortIfNeeded(addr, port)
}

// AppendPortIfNeeded appends port to addr when addr is a bare IP address.
// Anything else (already host:port, or not an IP, including a bracketed
// "[::]") is returned unchanged so that validation reports it, as upstream.
func AppendPortIfNeeded(addr string, port int) string {
	if _, _, err := net.SplitHostPort(addr); err == nil {
		return addr
	}
	if netutils.ParseIPSloppy(addr) == nil {
		return addr
	}
	return net.JoinHostPort(addr, strconv.Itoa(port))
}

func setDefaultInt32(p **int32, v int32) {
	if *p == nil {
		*p = &v
	}
}

func setDefaultDuration(d *metav1.Duration, v time.Duration) {
	if d.Duration == 0 {
		d.Duration = v
	}
}
