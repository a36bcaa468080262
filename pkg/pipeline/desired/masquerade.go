package desired

import (
	"net/netip"

	"github.com/svcproxy/svcproxy/pkg/proxy"
)

// The detectLocalMode values of the kube-proxy configuration.
const (
	DetectLocalClusterCIDR         = "ClusterCIDR"
	DetectLocalNodeCIDR            = "NodeCIDR"
	DetectLocalBridgeInterface     = "BridgeInterface"
	DetectLocalInterfaceNamePrefix = "InterfaceNamePrefix"
)

// masquerade turns the options into the family's masquerade policy.
func masquerade(opts Options, family proxy.IPFamily, node Node) Masquerade {
	m := Masquerade{All: opts.MasqueradeAll, Local: localDetector(opts, family, node)}
	if opts.MasqueradeBit >= 0 && opts.MasqueradeBit < 32 {
		m.Mark = 1 << uint(opts.MasqueradeBit)
	}
	return m
}

// localDetector mirrors upstream's local-traffic detector. A mode that lacks
// its input (no cluster CIDR of this family, no podCIDR, no interface name)
// yields LocalNone, the no-op detector: upstream then neither masquerades
// off-cluster traffic to cluster IPs nor short-circuits pod traffic for
// externalTrafficPolicy Local. An unknown mode, which config validation
// rejects, is treated the same way rather than guessed at.
func localDetector(opts Options, family proxy.IPFamily, node Node) LocalDetector {
	switch opts.DetectLocalMode {
	case "", DetectLocalClusterCIDR:
		return cidrDetector(opts.ClusterCIDRs, family)
	case DetectLocalNodeCIDR:
		return cidrDetector(node.PodCIDRs, family)
	case DetectLocalBridgeInterface:
		if opts.BridgeInterface != "" {
			return LocalDetector{Mode: LocalInterface, Interface: opts.BridgeInterface}
		}
	case DetectLocalInterfaceNamePrefix:
		if opts.InterfaceNamePrefix != "" {
			return LocalDetector{Mode: LocalInterfacePrefix, Interface: opts.InterfaceNamePrefix}
		}
	}
	return LocalDetector{}
}

func cidrDetector(prefixes []netip.Prefix, family proxy.IPFamily) LocalDetector {
	var cidrs []netip.Prefix
	for _, p := range prefixes {
		if family.Contains(p.Addr()) {
			cidrs = append(cidrs, p.Masked())
		}
	}
	if len(cidrs) == 0 {
		return LocalDetector{}
	}
	return LocalDetector{Mode: LocalCIDR, CIDRs: cidrs}
}
