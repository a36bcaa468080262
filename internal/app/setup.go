package app

import (
	"context"
	"fmt"
	"slices"

	"k8s.io/klog/v2"

	"github.com/svcproxy/svcproxy/internal/backends"
	"github.com/svcproxy/svcproxy/internal/config"
	"github.com/svcproxy/svcproxy/internal/ksysctl"
	"github.com/svcproxy/svcproxy/internal/nodesetup"
	"github.com/svcproxy/svcproxy/pkg/pipeline/desired"
	"github.com/svcproxy/svcproxy/pkg/proxy"
)

// setupNode applies the conntrack sysctls, oomScoreAdj and route_localnet,
// as upstream does at start and in --init-only. What this process may not
// change is skipped with a warning; other failures stop the start.
func setupNode(ctx context.Context, cfg *config.Config, b *backends.Backend) error {
	logger := klog.FromContext(ctx)
	oom := cfg.OOMScoreAdj
	res, err := nodesetup.Setup(nodesetup.Config{
		IPv4:                  slices.Contains(b.Families(), proxy.IPv4),
		MaxPerCore:            cfg.Conntrack.MaxPerCore,
		Min:                   cfg.Conntrack.Min,
		TCPEstablishedTimeout: cfg.Conntrack.TCPEstablishedTimeout,
		TCPCloseWaitTimeout:   cfg.Conntrack.TCPCloseWaitTimeout,
		UDPTimeout:            cfg.Conntrack.UDPTimeout,
		UDPStreamTimeout:      cfg.Conntrack.UDPStreamTimeout,
		TCPBeLiberal:          cfg.Conntrack.TCPBeLiberal,
		OOMScoreAdj:           &oom,
		LocalhostNodePorts:    desired.DecideLocalhost(b.Options(cfg, proxy.IPv4)) == desired.LocalhostDNAT,
	}, nodesetup.Env{Sysctl: ksysctl.Proc{}, InInitialNetNS: nodesetup.InInitialNetNS})
	for _, w := range res.Warnings {
		logger.Info("Warning: node setup: " + w)
	}
	if len(res.Changed) > 0 {
		logger.Info("Node setup changed sysctls", "changed", res.Changed)
	}
	if err != nil {
		return fmt.Errorf("node setup: %w", err)
	}
	return nil
}
