// Package leftovers removes what other proxy modes left in the kernel:
// at start, the modes svcproxy is not running in (OtherModes), and every
// mode for --cleanup (All). Which objects a mode leaves, and how to find
// them, is the mode's row in internal/backends (RemoveLeftovers).
package leftovers

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/svcproxy/svcproxy/internal/backends"
	"github.com/svcproxy/svcproxy/internal/config"
	"github.com/svcproxy/svcproxy/pkg/proxy"
)

// OtherModes removes what the other modes of reg left behind, as upstream
// does at start, in reg's order, except those mode's row keeps (iptables
// and IPVS modes leave each other's rules alone, KEP-2448). cfg is the
// running configuration, nil for the defaults.
func OtherModes(ctx context.Context, reg backends.Registry, mode proxy.Mode, cfg *config.Config) error {
	self, err := reg.Lookup(mode)
	if err != nil {
		return err
	}
	var others backends.Registry
	for _, b := range reg {
		if b.Mode != mode && !slices.Contains(self.KeepsLeftoversOf, b.Mode) {
			others = append(others, b)
		}
	}
	return remove(ctx, others, cfg)
}

// All removes the rules of every mode of reg (--cleanup) under cfg.
func All(ctx context.Context, reg backends.Registry, cfg *config.Config) error {
	return remove(ctx, reg, cfg)
}

// remove makes the leftovers of every mode of reg take no new connection
// (StopNewConnections), then removes them (RemoveLeftovers) in reg's
// order: a removal may take a while (ebpf mode's waits for the
// connections its tc programs hold), and until their mode's turn came,
// leftovers that see packets before the running mode's rules would take
// its new connections. A failure to stop leaves the removal to try again.
func remove(ctx context.Context, reg backends.Registry, cfg *config.Config) error {
	var errs []error
	for _, b := range reg {
		if b.StopNewConnections == nil {
			continue
		}
		if err := b.StopNewConnections(ctx, cfg); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", b.Mode, err))
		}
	}
	for _, b := range reg {
		if err := b.RemoveLeftovers(ctx, cfg); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", b.Mode, err))
		}
	}
	return errors.Join(errs...)
}
