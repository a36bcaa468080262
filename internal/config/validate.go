package config

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilnet "k8s.io/apimachinery/pkg/util/net"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/apimachinery/pkg/util/version"
	logsapi "k8s.io/component-base/logs/api/v1"
	"k8s.io/kube-proxy/config/v1alpha1"
)

// ipvsSchedulers are the schedulers upstream accepts ("" means rr).
var ipvsSchedulers = []string{"", "rr", "wrr", "lc", "wlc", "lblc", "lblcr", "sh", "dh", "sed", "nq", "mh"}

// errorList collects validation errors, each prefixed with its field path.
type errorList []error

func (l *errorList) add(path, format string, args ...any) {
	*l = append(*l, fmt.Errorf("%s: %s", path, fmt.Sprintf(format, args...)))
}

// Validate checks a defaulted object (SetDefaults and ApplyPlatformDefaults
// already applied) with the rules of contract §2.3 and returns every
// violation, joined; each names its field path.
func Validate(obj *v1alpha1.KubeProxyConfiguration) error {
	var errs errorList
	validateMode(&errs, obj)
	validateAddresses(&errs, obj)
	validateDetectLocal(&errs, obj)
	validateNodePortAddresses(&errs, obj.NodePortAddresses)
	validateLinux(&errs, obj)
	validateIPVS(&errs, &obj.IPVS)
	validateMisc(&errs, obj)
	if err := validateFeatureGates(obj.FeatureGates); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

func validateMode(errs *errorList, obj *v1alpha1.KubeProxyConfiguration) {
	switch Mode(obj.Mode) {
	case ModeIPTables, "":
		validateSyncPeriods(errs, "iptables", obj.IPTables.SyncPeriod, obj.IPTables.MinSyncPeriod)
	case ModeNFTables:
		validateSyncPeriods(errs, "nftables", obj.NFTables.SyncPeriod, obj.NFTables.MinSyncPeriod)
	case ModeIPVS:
		validateSyncPeriods(errs, "ipvs", obj.IPVS.SyncPeriod, obj.IPVS.MinSyncPeriod)
	default:
		errs.add("mode", "unsupported value %q: must be one of iptables, ipvs, nftables", obj.Mode)
	}
	validateMasqueradeBit(errs, "iptables.masqueradeBit", obj.IPTables.MasqueradeBit)
	validateMasqueradeBit(errs, "nftables.masqueradeBit", obj.NFTables.MasqueradeBit)
}

func validateSyncPeriods(errs *errorList, section string, sync, minSync metav1.Duration) {
	if sync.Duration <= 0 {
		errs.add(section+".syncPeriod", "must be greater than 0")
	}
	if minSync.Duration < 0 {
		errs.add(section+".minSyncPeriod", "must be greater than or equal to 0")
	}
	if minSync.Duration > sync.Duration {
		errs.add(section+".minSyncPeriod", "must be <= syncPeriod (%s > %s)", minSync.Duration, sync.Duration)
	}
}

func validateMasqueradeBit(errs *errorList, path string, bit *int32) {
	if bit != nil && (*bit < 0 || *bit > 31) {
		errs.add(path, "must be within the range [0, 31], got %d", *bit)
	}
}

func validateAddresses(errs *errorList, obj *v1alpha1.KubeProxyConfiguration) {
	if _, err := netip.ParseAddr(obj.BindAddress); err != nil {
		errs.add("bindAddress", "must be an IP address, got %q", obj.BindAddress)
	}
	if obj.HealthzBindAddress != "" {
		validateHostPort(errs, "healthzBindAddress", obj.HealthzBindAddress)
	}
	if obj.MetricsBindAddress != "" {
		validateHostPort(errs, "metricsBindAddress", obj.MetricsBindAddress)
	}
}

func validateHostPort(errs *errorList, path, hostPort string) {
	host, port, err := net.SplitHostPort(hostPort)
	if err != nil {
		errs.add(path, "must be IP:port, got %q", hostPort)
		return
	}
	if _, err := netip.ParseAddr(host); err != nil {
		errs.add(path, "must be IP:port, %q is not an IP address", host)
	}
	if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
		errs.add(path, "port must be within the range [1, 65535], got %q", port)
	}
}

func validateDetectLocal(errs *errorList, obj *v1alpha1.KubeProxyConfiguration) {
	switch LocalMode(obj.DetectLocalMode) {
	case "", LocalModeClusterCIDR, LocalModeNodeCIDR:
	case LocalModeBridgeInterface:
		if obj.DetectLocal.BridgeInterface == "" {
			errs.add("detectLocal.bridgeInterface", "must not be empty with detectLocalMode BridgeInterface")
		}
	case LocalModeInterfaceNamePrefix:
		if obj.DetectLocal.InterfaceNamePrefix == "" {
			errs.add("detectLocal.interfaceNamePrefix", "must not be empty with detectLocalMode InterfaceNamePrefix")
		}
	default:
		errs.add("detectLocalMode", "unsupported value %q: must be one of ClusterCIDR, NodeCIDR, BridgeInterface, InterfaceNamePrefix", obj.DetectLocalMode)
	}
	if obj.ClusterCIDR == "" {
		return
	}
	cidrs, err := parseCIDRList(obj.ClusterCIDR)
	switch {
	case err != nil:
		errs.add("clusterCIDR", "%v", err)
	case len(cidrs) > 2:
		errs.add("clusterCIDR", "only one CIDR or a dual-stack pair is allowed, got %q", obj.ClusterCIDR)
	case len(cidrs) == 2 && cidrs[0].Addr().Is4() == cidrs[1].Addr().Is4():
		errs.add("clusterCIDR", "two CIDRs must be one IPv4 and one IPv6, got %q", obj.ClusterCIDR)
	}
}

// validateNodePortAddresses accepts CIDRs and the keywords of upstream's
// newest release (primary, localhost, all). Older releases allowed only
// "primary", alone; every config they accept is accepted here too.
func validateNodePortAddresses(errs *errorList, addrs []string) {
	for i, a := range addrs {
		switch a {
		case NodePortAddressesPrimary, NodePortAddressesLocalhost, NodePortAddressesAll:
			if slices.Index(addrs, a) != i {
				errs.add(fmt.Sprintf("nodePortAddresses[%d]", i), "duplicate keyword %q", a)
			}
		default:
			if _, err := netip.ParsePrefix(a); err != nil {
				errs.add(fmt.Sprintf("nodePortAddresses[%d]", i), "must be a CIDR or one of primary, localhost, all, got %q", a)
			}
		}
	}
}

func validateLinux(errs *errorList, obj *v1alpha1.KubeProxyConfiguration) {
	if v := obj.OOMScoreAdj; v != nil && (*v < -1000 || *v > 1000) {
		errs.add("oomScoreAdj", "must be within the range [-1000, 1000], got %d", *v)
	}
	c := &obj.Conntrack
	nonNegativeInt32(errs, "conntrack.maxPerCore", c.MaxPerCore)
	nonNegativeInt32(errs, "conntrack.min", c.Min)
	if c.TCPEstablishedTimeout != nil {
		nonNegativeDuration(errs, "conntrack.tcpEstablishedTimeout", c.TCPEstablishedTimeout.Duration)
	}
	if c.TCPCloseWaitTimeout != nil {
		nonNegativeDuration(errs, "conntrack.tcpCloseWaitTimeout", c.TCPCloseWaitTimeout.Duration)
	}
	nonNegativeDuration(errs, "conntrack.udpTimeout", c.UDPTimeout.Duration)
	nonNegativeDuration(errs, "conntrack.udpStreamTimeout", c.UDPStreamTimeout.Duration)
}

func validateIPVS(errs *errorList, c *v1alpha1.KubeProxyIPVSConfiguration) {
	if !slices.Contains(ipvsSchedulers, c.Scheduler) {
		errs.add("ipvs.scheduler", "unsupported value %q: must be one of %s", c.Scheduler, strings.Join(ipvsSchedulers[1:], ", "))
	}
	for i, cidr := range c.ExcludeCIDRs {
		if _, err := netip.ParsePrefix(cidr); err != nil {
			errs.add(fmt.Sprintf("ipvs.excludeCIDRs[%d]", i), "must be a CIDR, got %q", cidr)
		}
	}
	nonNegativeDuration(errs, "ipvs.tcpTimeout", c.TCPTimeout.Duration)
	nonNegativeDuration(errs, "ipvs.tcpFinTimeout", c.TCPFinTimeout.Duration)
	nonNegativeDuration(errs, "ipvs.udpTimeout", c.UDPTimeout.Duration)
}

func validateMisc(errs *errorList, obj *v1alpha1.KubeProxyConfiguration) {
	if obj.ConfigSyncPeriod.Duration <= 0 {
		errs.add("configSyncPeriod", "must be greater than 0")
	}
	if obj.ClientConnection.Burst < 0 {
		errs.add("clientConnection.burst", "must be greater than or equal to 0")
	}
	if obj.PortRange != "" {
		if _, err := utilnet.ParsePortRange(obj.PortRange); err != nil {
			errs.add("portRange", "%v", err)
		}
	}
	if v := obj.ShowHiddenMetricsForVersion; v != "" {
		if _, err := version.ParseMajorMinor(v); err != nil {
			errs.add("showHiddenMetricsForVersion", "must be major.minor, got %q", v)
		}
	}
	gate, err := newFeatureGate(obj.FeatureGates)
	if err != nil {
		return // reported by validateFeatureGates
	}
	for _, e := range logsapi.Validate(&obj.Logging, gate, field.NewPath("logging")) {
		*errs = append(*errs, e)
	}
}

func nonNegativeInt32(errs *errorList, path string, v *int32) {
	if v != nil && *v < 0 {
		errs.add(path, "must be greater than or equal to 0, got %d", *v)
	}
}

func nonNegativeDuration(errs *errorList, path string, d time.Duration) {
	if d < 0 {
		errs.add(path, "must be greater than or equal to 0, got %s", d)
	}
}

// parseCIDRList splits a comma-separated list of CIDRs.
func parseCIDRList(s string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for _, part := range strings.Split(s, ",") {
		p, err := netip.ParsePrefix(strings.TrimSpace(part))
		if err != nil {
			return nil, fmt.Errorf("%q is not a valid CIDR", part)
		}
		out = append(out, p.Masked())
	}
	return out, nil
}
