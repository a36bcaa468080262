package app

import (
	"context"
	"fmt"

	"github.com/svcproxy/svcproxy/internal/backends"
	"github.com/svcproxy/svcproxy/internal/config"
	"github.com/svcproxy/svcproxy/internal/leftovers"
)

// run starts the proxy and blocks until ctx is done or it fails.
func run(ctx context.Context, cfg *config.Config) error {
	d, err := newDaemon(ctx, cfg, backends.Table)
	if err != nil {
		return err
	}
	return d.run(ctx)
}

// cleanup removes the rules of every mode and returns (--cleanup); any
// error makes the process exit non-zero, as upstream.
func cleanup(ctx context.Context, cfg *config.Config) error {
	if err := leftovers.All(ctx, backends.Table, cfg); err != nil {
		return fmt.Errorf("cleanup: %w", err)
	}
	return nil
}

// initOnly performs the privileged initialisation and returns (--init-only).
func initOnly(ctx context.Context, cfg *config.Config) error {
	b, err := backends.Table.Lookup(cfg.Mode)
	if err != nil {
		return err
	}
	if err := setupNode(ctx, cfg, b); err != nil {
		return err
	}
	inst, err := openBackend(ctx, b, cfg, b.Families(), true)
	if err != nil {
		return err
	}
	inst.Close()
	return nil
}
