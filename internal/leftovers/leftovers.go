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
	"github.com/svcproxy/svcproxy/pkg/proxy"
)

// OtherModes removes what the other modes of reg left behind, as upstream
// does at start, in reg's order, except those mode's row keeps (iptables
// and IPVS modes leave each other's rules alone, KEP-2448).
func OtherModes(ctx context.Context, reg backends.Registry, mode proxy.Mode) error {
	self, err := reg.Lookup(mode)
	if err != nil {
		return err
	}
	var errs []error
	for _, b := range reg {
		if b.Mode == mode || slices.Contains(self.KeepsLeftoversOf, b.Mode) {
			continue
		}
		errs = append(errs, b.RemoveLeftovers(ctx))
	}
	return errors.Join(errs...)
}

// All removes the rules of every mode of reg (--cleanup).
func All(ctx context.Context, reg backends.Registry) error {
	var errs []error
	for _, b := range reg {
		if err := b.RemoveLeftovers(ctx); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", b.Mode, err))
		}
	}
	return errors.Join(errs...)
}
