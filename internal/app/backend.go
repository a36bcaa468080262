package app

import (
	"context"
	"fmt"

	"github.com/svcproxy/svcproxy/internal/backends"
	"github.com/svcproxy/svcproxy/internal/config"
	"github.com/svcproxy/svcproxy/pkg/proxy"
)

// The app knows no backend by name: it reads its mode's row in
// backends.Table (or, in tests, a registry of their own).

// openBackend opens b's backend for families and initializes each of its
// Proxiers (Init is idempotent, so a backend that serves both families
// from one Proxier may be initialized twice); initOnly is --init-only.
func openBackend(ctx context.Context, b *backends.Backend, cfg *config.Config, families []proxy.IPFamily, initOnly bool) (*backends.Instance, error) {
	inst, err := b.Open(ctx, backends.Env{Config: cfg, Families: families, InitOnly: initOnly})
	if err != nil {
		return nil, err
	}
	for _, f := range families {
		p, ok := inst.Proxiers[f]
		if !ok {
			inst.Close()
			return nil, fmt.Errorf("proxy mode %s opened no %s proxier", b.Mode, f)
		}
		if err := p.Init(ctx); err != nil {
			inst.Close()
			return nil, fmt.Errorf("initializing %s %s: %w", b.Mode, f, err)
		}
	}
	return inst, nil
}
