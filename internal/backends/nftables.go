package backends

import (
	"context"

	"github.com/svcproxy/svcproxy/internal/config"
	"github.com/svcproxy/svcproxy/internal/metrics"
	"github.com/svcproxy/svcproxy/pkg/pipeline/backends/nftables"
	"github.com/svcproxy/svcproxy/pkg/pipeline/desired"
	proxymetrics "github.com/svcproxy/svcproxy/pkg/pipeline/metrics"
	"github.com/svcproxy/svcproxy/pkg/pipeline/syncer"
	"github.com/svcproxy/svcproxy/pkg/proxy"
)

// nftablesBackend is nftables mode's row.
var nftablesBackend = Backend{
	Mode: proxy.ModeNFTables,
	// nftables always has both tables, whether or not the host has IPv6.
	Families: func() []proxy.IPFamily { return proxy.Families },
	Open:     openNFTables,
	Decide: func(cfg *config.Config, o *desired.Options) {
		// Upstream drops traffic to unallocated ServiceCIDR addresses in
		// nftables mode only.
		o.DropUnallocated = true
		if nftablesLocalhost(cfg) {
			o.Localhost = desired.LocalhostModeProxied
		}
	},
	RemoveLeftovers: anyConfig(nftables.CleanupTables),
	Objects:         nftablesObjects,
	SyncFailures:    proxymetrics.NFTablesSyncFailuresTotal,
}

// nftablesLocalhost: the alpha gate KubeProxyNFTablesLocalhostNodePorts
// (KEP-6032) asks for node ports on loopback.
func nftablesLocalhost(cfg *config.Config) bool {
	return cfg.FeatureGate != nil && cfg.FeatureGate.Enabled(config.KubeProxyNFTablesLocalhostNodePorts)
}

func openNFTables(_ context.Context, env Env) (*Instance, error) {
	inst, err := PerFamily(env,
		func(f proxy.IPFamily) (*nftables.Proxier, error) { return nftables.New(f, nftables.Options{}) },
		func(p *nftables.Proxier) syncer.Backend {
			return syncer.Backend{Proxier: p, Preparer: p, RulesHolder: p, PortHolder: p}
		},
		(*nftables.Proxier).Close)
	if err != nil {
		return nil, err
	}
	if !env.InitOnly && nftablesLocalhost(env.Config) {
		inst.Metrics = append(inst.Metrics, metrics.WithLocalhostNodePorts(nftables.NewRejectCounters(env.Families)))
	}
	return inst, nil
}
