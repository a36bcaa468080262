package config

import (
	"errors"
	"fmt"
	"net/netip"
)

// DefaultModeMessage is upstream 1.37's warning (and KubeProxyDefaultMode
// event) when no mode is configured (KEP-5343: the default becomes nftables
// in 1.40).
const DefaultModeMessage = "No kube-proxy mode specified: defaulting to 'iptables'. Note that in Kubernetes 1.40 the default mode will switch to 'nftables'. If you wish to continue using 'iptables' mode, you must explicitly specify 'mode: iptables' in the kube-proxy config file, or '--proxy-mode iptables' on the kube-proxy command line."

// IPVSDeprecationMessage is upstream's error log line and IPVSDeprecation
// event in ipvs mode (KEP-5495).
const IPVSDeprecationMessage = "The ipvs proxier has been deprecated and will be disabled by default in Kubernetes 1.40 and removed in Kubernetes 1.43. Migrate to the 'nftables' proxier instead."

// NodeFacts is what the startup checks need to know about this node.
type NodeFacts struct {
	// PrimaryIPv6 is the family of the primary node IP (bindAddress if
	// set, else the Node's first address).
	PrimaryIPv6 bool
	// IPv4 and IPv6 are the node IP of each family (zero when none).
	IPv4, IPv6 netip.Addr
	PodCIDRs   []netip.Prefix
	// DualStack is true when both families can be programmed.
	DualStack bool
}

// CheckBadConfig returns upstream's non-fatal remarks about nodePortAddresses
// (checkBadConfig): unset, or limited to one family while the configuration
// looks dual-stack or names only the other family.
// The keywords are expanded first, as upstream does before checking.
func CheckBadConfig(cfg *Config, node NodeFacts) error {
	expanded := expandNodePortAddresses(cfg.NodePortAddresses, node)
	cidrs := nodePortCIDRs(expanded)
	dualStackConfig := isDualStack(cfg.ClusterCIDRs) || isDualStack(cfg.IPVS.ExcludeCIDRs) ||
		isDualStack(node.PodCIDRs) || isDualStack(cidrs)
	primary, other := familyNames(node.PrimaryIPv6)
	primaryCount := 0
	for _, p := range cidrs {
		if p.Addr().Is6() == node.PrimaryIPv6 {
			primaryCount++
		}
	}
	switch {
	case len(expanded) == 0:
		return errors.New("nodePortAddresses is unset; NodePort connections will be accepted on all local IPs. Consider using `--nodeport-addresses primary`")
	case dualStackConfig && primaryCount == len(expanded):
		return fmt.Errorf("cluster appears to be dual-stack but nodePortAddresses contains only %s addresses; NodePort connections will be accepted on all local %s IPs", primary, other)
	case primaryCount == 0:
		return fmt.Errorf("cluster appears to be %s-primary but nodePortAddresses contains only %s addresses; NodePort connections will be accepted on all local %s IPs", primary, other, primary)
	}
	return nil
}

// CheckBadIPConfig returns upstream's remarks about CIDRs and addresses of
// the wrong IP family (checkBadIPConfig), and whether they are fatal: a
// wrong-family clusterCIDR in ClusterCIDR mode on a single-stack host, or
// wrong-family podCIDRs in NodeCIDR mode.
func CheckBadIPConfig(cfg *Config, node NodeFacts) (err error, fatal bool) {
	primary, _ := familyNames(node.PrimaryIPv6)
	bad := "4"
	if !node.PrimaryIPv6 {
		bad = "6"
	}
	clusterType := primary + "-only"
	if node.DualStack {
		clusterType = primary + "-primary"
	}
	var errs []error
	if allOtherFamily(cfg.ClusterCIDRs, node.PrimaryIPv6) {
		errs = append(errs, fmt.Errorf("cluster is %s but clusterCIDRs contains only IPv%s addresses", clusterType, bad))
		fatal = fatal || (cfg.DetectLocalMode == LocalModeClusterCIDR && !node.DualStack)
	}
	if allOtherFamily(node.PodCIDRs, node.PrimaryIPv6) {
		errs = append(errs, fmt.Errorf("cluster is %s but node.spec.podCIDRs contains only IPv%s addresses", clusterType, bad))
		fatal = fatal || cfg.DetectLocalMode == LocalModeNodeCIDR
	}
	if !node.DualStack {
		if allOtherFamily(cfg.IPVS.ExcludeCIDRs, node.PrimaryIPv6) {
			errs = append(errs, fmt.Errorf("cluster is %s but ipvs.excludeCIDRs contains only IPv%s addresses", clusterType, bad))
		}
		if addrOtherFamily(cfg.HealthzBindAddress, node.PrimaryIPv6) {
			errs = append(errs, fmt.Errorf("cluster is %s but healthzBindAddress is IPv%s", clusterType, bad))
		}
		if addrOtherFamily(cfg.MetricsBindAddress, node.PrimaryIPv6) {
			errs = append(errs, fmt.Errorf("cluster is %s but metricsBindAddress is IPv%s", clusterType, bad))
		}
	}
	return errors.Join(errs...), fatal
}

func familyNames(ipv6 bool) (primary, other string) {
	if ipv6 {
		return "IPv6", "IPv4"
	}
	return "IPv4", "IPv6"
}

// expandNodePortAddresses replaces the keywords by CIDRs: primary by the
// node IPs (loopback ones skipped), localhost by both loopback ranges, all
// by both zero CIDRs.
func expandNodePortAddresses(addrs []string, node NodeFacts) []string {
	var out []string
	for _, a := range addrs {
		switch a {
		case NodePortAddressesPrimary:
			for _, ip := range []netip.Addr{node.IPv4, node.IPv6} {
				if ip.IsValid() && !ip.IsLoopback() {
					out = append(out, netip.PrefixFrom(ip, ip.BitLen()).String())
				}
			}
		case NodePortAddressesLocalhost:
			out = append(out, "127.0.0.0/8", "::1/128")
		case NodePortAddressesAll:
			out = append(out, "0.0.0.0/0", "::/0")
		default:
			out = append(out, a)
		}
	}
	return out
}

// nodePortCIDRs are the CIDR entries of nodePortAddresses (keywords are
// skipped, as upstream's MapCIDRsByIPFamily skips non-CIDRs).
func nodePortCIDRs(addrs []string) []netip.Prefix {
	var out []netip.Prefix
	for _, a := range addrs {
		if p, ok := parsePrefix(a); ok {
			out = append(out, p)
		}
	}
	return out
}

// isDualStack: at least one CIDR of each family.
func isDualStack(cidrs []netip.Prefix) bool {
	var v4, v6 bool
	for _, p := range cidrs {
		v4, v6 = v4 || p.Addr().Is4(), v6 || p.Addr().Is6()
	}
	return v4 && v6
}

// allOtherFamily: a non-empty list whose CIDRs are all not of the primary family.
func allOtherFamily(cidrs []netip.Prefix, primaryIPv6 bool) bool {
	for _, p := range cidrs {
		if p.Addr().Is6() == primaryIPv6 {
			return false
		}
	}
	return len(cidrs) > 0
}

// addrOtherFamily: an ip:port whose IP is of the other family, and not
// unspecified (upstream treats 0.0.0.0 and :: as matching either).
func addrOtherFamily(hostPort string, primaryIPv6 bool) bool {
	ap, err := netip.ParseAddrPort(hostPort)
	if err != nil || ap.Addr().IsUnspecified() {
		return false
	}
	return ap.Addr().Unmap().Is6() != primaryIPv6
}
