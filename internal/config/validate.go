package config

import (
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"

	"github.com/blang/semver/v4"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/component-base/featuregate"
	logsapi "k8s.io/component-base/logs/api/v1"
	metricsapi "k8s.io/component-base/metrics/api/v1"
	"k8s.io/kube-proxy/config/v1alpha1"
	netutils "k8s.io/utils/net"

	"github.com/svcproxy/svcproxy/pkg/proxy"
)

// root is the path upstream's validation names every field under. The
// paths are upstream's internal field names (KubeProxyConfiguration.SyncPeriod,
// ...KubeProxyIPTablesConfiguration.MasqueradeBit), not the v1alpha1 JSON
// names: operators and tooling match these messages, so they are kept as
// upstream prints them.
var root = field.NewPath("KubeProxyConfiguration")

// Validate checks a defaulted, normalized object (SetDefaults,
// ApplyPlatformDefaults and Normalize applied) with upstream's rules
// (pkg/proxy/apis/config/validation) and returns every violation.
func Validate(obj *v1alpha1.KubeProxyConfiguration) error {
	return validate(obj).ToAggregate()
}

func validate(obj *v1alpha1.KubeProxyConfiguration) field.ErrorList {
	var errs field.ErrorList
	gate, err := NewFeatureGate(obj.FeatureGates)
	if err != nil {
		errs = append(errs, field.Invalid(root.Child("featureGates"), obj.FeatureGates, err.Error()))
		if gate, err = newDefaultFeatureGate(); err != nil {
			return append(errs, field.InternalError(root.Child("featureGates"), err))
		}
	}
	errs = append(errs, validateMasqueradeBit(obj.IPTables.MasqueradeBit, root.Child("KubeProxyIPTablesConfiguration"))...)
	switch mode := proxy.Mode(obj.Mode); {
	case mode == proxy.ModeIPVS:
		errs = append(errs, validateIPVS(&obj.IPVS, root.Child("KubeProxyIPVSConfiguration"))...)
	case mode.UsesNFTablesSection():
		errs = append(errs, validateMasqueradeBit(obj.NFTables.MasqueradeBit, root.Child("KubeProxyNFTablesConfiguration"))...)
	}
	errs = append(errs, validateLinux(obj, root.Child("KubeProxyLinuxConfiguration"))...)
	errs = append(errs, validateMode(proxy.Mode(obj.Mode), gate, root.Child("Mode"))...)
	if obj.ClientConnection.Burst < 0 {
		errs = append(errs, field.Invalid(root.Child("ClientConnection", "Burst"), obj.ClientConnection.Burst, "must be greater than or equal to 0"))
	}
	errs = append(errs, validatePeriods(obj)...)
	errs = append(errs, validateAddresses(obj)...)
	errs = append(errs, validateNodePortAddresses(obj.NodePortAddresses, root.Child("NodePortAddresses"))...)
	errs = append(errs, validateShowHiddenMetrics(obj.ShowHiddenMetricsForVersion, root.Child("ShowHiddenMetricsForVersion"))...)
	errs = append(errs, validateDetectLocal(obj)...)
	return append(errs, logsapi.Validate(&obj.Logging, gate, root.Child("logging"))...)
}

func validateMasqueradeBit(bit *int32, path *field.Path) field.ErrorList {
	if bit != nil && (*bit < 0 || *bit > 31) {
		return field.ErrorList{field.Invalid(path.Child("MasqueradeBit"), *bit, "must be within the range [0, 31]")}
	}
	return nil
}

// validateIPVS runs in ipvs mode only, as upstream's; the scheduler is
// checked when the proxier starts (upstream: CanUseIPVSProxier).
func validateIPVS(c *v1alpha1.KubeProxyIPVSConfiguration, path *field.Path) field.ErrorList {
	errs := nonNegative(nil, path.Child("TCPTimeout"), c.TCPTimeout.Duration)
	errs = nonNegative(errs, path.Child("TCPFinTimeout"), c.TCPFinTimeout.Duration)
	errs = nonNegative(errs, path.Child("UDPTimeout"), c.UDPTimeout.Duration)
	for i, cidr := range c.ExcludeCIDRs {
		if _, _, err := netutils.ParseCIDRSloppy(cidr); err != nil {
			errs = append(errs, field.Invalid(path.Child("ExcludeCidrs").Index(i), cidr, "must be a valid CIDR"))
		}
	}
	return errs
}

func validateLinux(obj *v1alpha1.KubeProxyConfiguration, path *field.Path) field.ErrorList {
	var errs field.ErrorList
	c, ct := &obj.Conntrack, path.Child("KubeProxyConntrackConfiguration")
	if c.MaxPerCore != nil && *c.MaxPerCore < 0 {
		errs = append(errs, field.Invalid(ct.Child("MaxPerCore"), *c.MaxPerCore, "must be greater than or equal to 0"))
	}
	if c.Min != nil && *c.Min < 0 {
		errs = append(errs, field.Invalid(ct.Child("Min"), *c.Min, "must be greater than or equal to 0"))
	}
	if c.TCPEstablishedTimeout != nil {
		errs = nonNegative(errs, ct.Child("TCPEstablishedTimeout"), c.TCPEstablishedTimeout.Duration)
	}
	if c.TCPCloseWaitTimeout != nil {
		errs = nonNegative(errs, ct.Child("TCPCloseWaitTimeout"), c.TCPCloseWaitTimeout.Duration)
	}
	errs = nonNegative(errs, ct.Child("UDPTimeout"), c.UDPTimeout.Duration)
	errs = nonNegative(errs, ct.Child("UDPStreamTimeout"), c.UDPStreamTimeout.Duration)
	if v := obj.OOMScoreAdj; v != nil && (*v < -1000 || *v > 1000) {
		errs = append(errs, field.Invalid(path.Child("OOMScoreAdj"), *v, "must be within the range [-1000, 1000]"))
	}
	return errs
}

// validateMode accepts the modes of proxy.Modes, ipvs only while the
// KubeProxyIPVS gate is on, and svcproxy's extension modes; the message is
// upstream's, which names upstream's modes only.
func validateMode(mode proxy.Mode, gate featuregate.FeatureGate, path *field.Path) field.ErrorList {
	var valid []string
	for _, m := range proxy.Modes {
		if m != proxy.ModeIPVS || gate.Enabled(KubeProxyIPVS) {
			valid = append(valid, string(m))
		}
	}
	for _, v := range append(valid, "") {
		if string(mode) == v || slices.Contains(proxy.ExtensionModes, mode) {
			return nil
		}
	}
	msg := fmt.Sprintf("must be %s or blank (blank means the best-available proxy [currently iptables])", strings.Join(valid, ", "))
	return field.ErrorList{field.Invalid(path.Child("ProxyMode"), string(mode), msg)}
}

// validatePeriods checks configSyncPeriod and the sync periods of the
// active mode's section (the only one upstream keeps).
func validatePeriods(obj *v1alpha1.KubeProxyConfiguration) field.ErrorList {
	var errs field.ErrorList
	if obj.ConfigSyncPeriod.Duration <= 0 {
		errs = append(errs, field.Invalid(root.Child("ConfigSyncPeriod"), obj.ConfigSyncPeriod, "must be greater than 0"))
	}
	sync, minSync := activePeriods(obj)
	if sync.Duration <= 0 {
		errs = append(errs, field.Invalid(root.Child("SyncPeriod"), sync, "must be greater than 0"))
	}
	if minSync.Duration < 0 {
		errs = append(errs, field.Invalid(root.Child("MinSyncPeriod"), minSync, "must be greater than or equal to 0"))
	}
	if minSync.Duration > sync.Duration {
		errs = append(errs, field.Invalid(root.Child("SyncPeriod"), minSync, "must be greater than or equal to "+root.Child("MinSyncPeriod").String()))
	}
	return errs
}

func validateAddresses(obj *v1alpha1.KubeProxyConfiguration) field.ErrorList {
	var errs field.ErrorList
	if netutils.ParseIPSloppy(obj.BindAddress) == nil {
		errs = append(errs, field.Invalid(root.Child("BindAddress"), obj.BindAddress, "not a valid textual representation of an IP address"))
	}
	if obj.HealthzBindAddress != "" {
		errs = append(errs, validateHostPort(obj.HealthzBindAddress, root.Child("HealthzBindAddress"))...)
	}
	// Upstream requires a metrics address: only the flags can disable it.
	return append(errs, validateHostPort(obj.MetricsBindAddress, root.Child("MetricsBindAddress"))...)
}

func validateHostPort(hostPort string, path *field.Path) field.ErrorList {
	host, port, err := net.SplitHostPort(hostPort)
	if err != nil {
		return field.ErrorList{field.Invalid(path, hostPort, "must be IP:port")}
	}
	var errs field.ErrorList
	if netutils.ParseIPSloppy(host) == nil {
		errs = append(errs, field.Invalid(path, host, "must be a valid IP"))
	}
	if p, err := strconv.Atoi(port); err != nil || p < 1 || p > 65535 {
		errs = append(errs, field.Invalid(path, port, "must be a valid port"))
	}
	return errs
}

// validateNodePortAddresses accepts CIDRs and the keywords primary,
// localhost and all, each keyword at most once.
func validateNodePortAddresses(addrs []string, path *field.Path) field.ErrorList {
	var errs field.ErrorList
	seen := map[string]bool{}
	for i, a := range addrs {
		switch a {
		case NodePortAddressesPrimary, NodePortAddressesLocalhost, NodePortAddressesAll:
			if seen[a] {
				errs = append(errs, field.Duplicate(path.Index(i), a))
			}
			seen[a] = true
			continue
		}
		if _, _, err := netutils.ParseCIDRSloppy(a); err != nil {
			errs = append(errs, field.Invalid(path.Index(i), a, "must be a valid CIDR or one of the keywords 'primary', 'localhost', 'all'"))
		}
	}
	return errs
}

// validateShowHiddenMetrics allows only the previous minor release of the
// upstream version svcproxy stands in for, as upstream does for its own.
func validateShowHiddenMetrics(v string, path *field.Path) field.ErrorList {
	if v == "" {
		return nil
	}
	current := semver.MustParse(upstreamBinaryVersion + ".0")
	if err := metricsapi.ValidateShowHiddenMetricsVersionForKubeletBackwardCompatOnly(current, v); err != nil {
		return field.ErrorList{field.Invalid(path, v, err.Error())}
	}
	return nil
}

func validateDetectLocal(obj *v1alpha1.KubeProxyConfiguration) field.ErrorList {
	path := root.Child("DetectLocalConfiguration")
	switch LocalMode(obj.DetectLocalMode) {
	case "", LocalModeNodeCIDR:
		return nil
	case LocalModeBridgeInterface:
		return validateInterface(obj.DetectLocal.BridgeInterface, path.Child("InterfaceName"))
	case LocalModeInterfaceNamePrefix:
		return validateInterface(obj.DetectLocal.InterfaceNamePrefix, path.Child("InterfacePrefix"))
	case LocalModeClusterCIDR:
		// Only this mode uses clusterCIDR, so only this mode checks it.
		if obj.ClusterCIDR == "" {
			return nil
		}
		return validateClusterCIDRs(strings.Split(obj.ClusterCIDR, ","), path.Child("ClusterCIDRs"))
	}
	valid := []string{string(LocalModeClusterCIDR), string(LocalModeNodeCIDR), string(LocalModeBridgeInterface), string(LocalModeInterfaceNamePrefix), ""}
	return field.ErrorList{field.NotSupported(root.Child("DetectLocalMode"), string(obj.DetectLocalMode), valid)}
}

func validateInterface(name string, path *field.Path) field.ErrorList {
	if name == "" {
		return field.ErrorList{field.Invalid(path, name, "must not be empty")}
	}
	return nil
}

const dualStackPairMsg = "must be a either a single CIDR or dual-stack pair of CIDRs (e.g. [10.100.0.0/16, fde4:8dba:82e1::/48]"

func validateClusterCIDRs(cidrs []string, path *field.Path) field.ErrorList {
	if len(cidrs) > 2 {
		return field.ErrorList{field.Invalid(path, cidrs, dualStackPairMsg)}
	}
	var errs field.ErrorList
	for i, c := range cidrs {
		if _, _, err := netutils.ParseCIDRSloppy(c); err != nil {
			errs = append(errs, field.Invalid(path.Index(i), c, "must be a valid CIDR block (e.g. 10.100.0.0/16 or fde4:8dba:82e1::/48)"))
		}
	}
	if len(cidrs) == 2 {
		if dual, err := netutils.IsDualStackCIDRStrings(cidrs); err == nil && !dual {
			errs = append(errs, field.Invalid(path, cidrs, dualStackPairMsg))
		}
	}
	return errs
}

func nonNegative[T ~int64](errs field.ErrorList, path *field.Path, d T) field.ErrorList {
	if d < 0 {
		return append(errs, field.Invalid(path, d, "must be greater than or equal to 0"))
	}
	return errs
}
