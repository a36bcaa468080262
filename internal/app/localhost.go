package app

import (
	"context"
	"net/netip"
	"strings"

	"github.com/svcproxy/svcproxy/internal/config"
	"github.com/svcproxy/svcproxy/internal/localnodeport"
	"github.com/svcproxy/svcproxy/pkg/proxy"
	"github.com/svcproxy/svcproxy/pkg/proxy/desired"
	"github.com/svcproxy/svcproxy/pkg/proxy/model"
	"github.com/svcproxy/svcproxy/pkg/proxy/nftables"
)

// localhostNodePortsOn says whether the gate KubeProxyNFTablesLocalhostNodePorts
// (KEP-6032) applies: it is on and the mode is nftables.
func localhostNodePortsOn(cfg *config.Config) bool {
	return cfg.Mode == config.ModeNFTables && cfg.FeatureGate != nil &&
		cfg.FeatureGate.Enabled(config.KubeProxyNFTablesLocalhostNodePorts)
}

// localhostNodePorts decides, as upstream's nftables proxier, what a
// family's table does with node-port traffic to loopback: nothing with the
// gate off; with it on, TCP is served by the userspace proxy when
// nodePortAddresses names loopback explicitly for the family, and what is
// not served is rejected and counted.
func localhostNodePorts(cfg *config.Config, family proxy.IPFamily) nftables.LocalhostNodePorts {
	switch {
	case !localhostNodePortsOn(cfg):
		return nftables.LocalhostNodePortsOff
	case explicitLoopback(cfg.NodePortAddresses, family):
		return nftables.LocalhostNodePortsProxied
	default:
		return nftables.LocalhostNodePortsReject
	}
}

// explicitLoopback reports whether nodePortAddresses holds a range of
// family that targets loopback itself ("localhost", 127.0.0.0/8, ::1/128),
// as upstream's ContainsExplicitLoopback: a range that merely contains
// loopback (0.0.0.0/0, "all") does not count.
func explicitLoopback(addrs []string, family proxy.IPFamily) bool {
	for _, a := range addrs {
		a = strings.TrimSpace(a)
		if a == config.NodePortAddressesLocalhost {
			return true
		}
		p, err := netip.ParsePrefix(a)
		if err != nil || !family.Contains(p.Addr()) {
			continue
		}
		if p.Masked().Addr().IsLoopback() {
			return true
		}
	}
	return false
}

// localhostProxy returns the userspace node-port proxy of family and its
// AfterSync hook, or nil when the family's table does not hand TCP to it.
// The proxy stops with ctx.
func localhostProxy(ctx context.Context, cfg *config.Config, family proxy.IPFamily) func(*desired.State, model.Changes) {
	if localhostNodePorts(cfg, family) != nftables.LocalhostNodePortsProxied {
		return nil
	}
	lp := localnodeport.New(ctx, family)
	go func() {
		<-ctx.Done()
		lp.Close()
	}()
	return lp.Observe
}
