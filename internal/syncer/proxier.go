// Package syncer runs one IP family's sync loop: it commits the tracker,
// computes the desired state, hands it to a Proxier, and keeps the health
// timestamps and sync metrics. It is the only place that knows about timing.
package syncer

import (
	"context"

	"github.com/svcproxy/svcproxy/pkg/proxy/desired"
)

// Proxier programs one IP family of the kernel. Implementations are the
// nftables, iptables and ipvs backends.
type Proxier interface {
	// Init does the privileged, idempotent setup (what --init-only runs).
	Init(ctx context.Context) error
	// Sync makes the kernel match state. It always receives the complete
	// desired state; state.Changed (if non-nil) says what changed since the
	// previous call. After an error the next call must reconcile fully.
	Sync(ctx context.Context, state *desired.State) error
	// Cleanup removes everything the backend ever programmed (--cleanup).
	Cleanup(ctx context.Context) error
}
