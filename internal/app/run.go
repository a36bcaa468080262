package app

import (
	"context"
	"fmt"

	"github.com/svcproxy/svcproxy/internal/config"
	"github.com/svcproxy/svcproxy/internal/leftovers"
)

// run starts the proxy and blocks until ctx is done or it fails.
func run(ctx context.Context, cfg *config.Config) error {
	if err := checkMode(cfg.Mode); err != nil {
		return err
	}
	d, err := newDaemon(ctx, cfg)
	if err != nil {
		return err
	}
	return d.run(ctx)
}

// cleanup removes the rules of every mode and returns (--cleanup); any
// error makes the process exit non-zero, as upstream.
func cleanup(ctx context.Context, _ *config.Config) error {
	if err := leftovers.All(ctx); err != nil {
		return fmt.Errorf("cleanup: %w", err)
	}
	return nil
}

// initOnly performs the privileged initialisation and returns (--init-only).
func initOnly(ctx context.Context, cfg *config.Config) error {
	if err := checkMode(cfg.Mode); err != nil {
		return err
	}
	if err := setupNode(ctx, cfg); err != nil {
		return err
	}
	flavour := iptablesFlavour(ctx, cfg.Mode)
	for _, f := range proxyFamilies(cfg.Mode) {
		p, err := newProxier(ctx, cfg, f, nil, flavour)
		if err != nil {
			return err
		}
		if err := p.Init(ctx); err != nil {
			return fmt.Errorf("initializing %s %s: %w", cfg.Mode, f, err)
		}
	}
	return nil
}
