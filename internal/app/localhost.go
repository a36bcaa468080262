package app

import (
	"context"

	"github.com/svcproxy/svcproxy/internal/config"
	"github.com/svcproxy/svcproxy/internal/localnodeport"
	"github.com/svcproxy/svcproxy/pkg/proxy"
	"github.com/svcproxy/svcproxy/pkg/proxy/desired"
	"github.com/svcproxy/svcproxy/pkg/proxy/model"
)

// localhostMode names what the mode and its configuration ask of node
// ports on loopback; desired decides, per family and nodePortAddresses,
// what that means (desired.DecideLocalhost).
func localhostMode(cfg *config.Config) desired.LocalhostMode {
	switch {
	case cfg.Mode == config.ModeIPTables && cfg.LocalhostNodePorts:
		return desired.LocalhostModeIPTables
	case cfg.Mode == config.ModeNFTables && cfg.FeatureGate != nil &&
		cfg.FeatureGate.Enabled(config.KubeProxyNFTablesLocalhostNodePorts):
		// KEP-6032.
		return desired.LocalhostModeNFTables
	}
	return desired.LocalhostModeNone
}

// localhostProxy returns the userspace node-port proxy of family and its
// AfterSync hook, or nil when desired does not hand the family's localhost
// TCP node ports to it. The proxy stops with ctx.
func localhostProxy(ctx context.Context, cfg *config.Config, family proxy.IPFamily) func(*desired.State, model.Changes) {
	if desired.DecideLocalhost(computeOptions(cfg, family)) != desired.LocalhostProxied {
		return nil
	}
	lp := localnodeport.New(ctx, family, localnodeport.Options{})
	go func() {
		<-ctx.Done()
		lp.Close()
	}()
	return lp.Observe
}
