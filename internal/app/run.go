package app

import (
	"context"
	"fmt"

	"github.com/svcproxy/svcproxy/internal/config"
)

// run starts the proxy and blocks until ctx is done or it fails.
func run(ctx context.Context, cfg *config.Config) error {
	return fmt.Errorf("proxy mode %q is not implemented yet", cfg.Mode)
}

// cleanup removes the rules of every mode and returns (--cleanup).
func cleanup(ctx context.Context, cfg *config.Config) error {
	return fmt.Errorf("proxy mode %q is not implemented yet", cfg.Mode)
}

// initOnly performs the privileged initialisation and returns (--init-only).
func initOnly(ctx context.Context, cfg *config.Config) error {
	return fmt.Errorf("proxy mode %q is not implemented yet", cfg.Mode)
}
