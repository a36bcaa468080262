// Package syncer runs one IP family's sync loop: it commits the tracker,
// computes the desired state, hands it to a Proxier, and keeps the health
// timestamps and sync metrics. It is the only place that knows about timing,
// and the only place that decides whether a sync is full (see README.md).
package syncer

import (
	"context"
	"time"

	"github.com/svcproxy/svcproxy/pkg/pipeline/desired"
	"github.com/svcproxy/svcproxy/pkg/proxy"
)

// Proxier programs one IP family of the kernel. Implementations are the
// nftables, iptables and ipvs backends.
type Proxier interface {
	// Init does the privileged, idempotent setup (what --init-only runs).
	Init(ctx context.Context) error
	// Sync makes the kernel match state, reconciling as much as mode
	// says; the syncer decides the mode, the backend obeys it. With
	// proxy.PartialSync only the service ports in state.Changed differ
	// from the previous successful call. After an error the next call is
	// a proxy.RecoverySync. Sync reports with proxy.ErrStateLost and
	// proxy.ErrFullSyncNeeded what the syncer must know for the next mode.
	Sync(ctx context.Context, state *desired.State, mode proxy.SyncMode) error
	// CanaryMissing reports whether the rules Sync programmed were removed
	// behind the backend's back (a firewall reload, an admin); the syncer
	// polls it every syncPeriod and answers true with a RecoverySync. It
	// may run concurrently with Sync, and only reads the kernel.
	CanaryMissing(ctx context.Context) (bool, error)
	// Cleanup removes everything the backend ever programmed (--cleanup).
	Cleanup(ctx context.Context) error
}

// Backend is a Proxier and the optional capabilities it has. Whoever builds
// it (the backend's row in internal/backends) names each capability, so the
// syncer asks a field instead of guessing from the Proxier's type, and a
// wrapper around a Proxier keeps or drops capabilities on purpose. A nil
// field is a capability the backend lacks.
type Backend struct {
	Proxier
	// Preparer reads the kernel back ahead of the first sync.
	Preparer Preparer
	// RulesHolder tells, after that read, whether rules were held.
	RulesHolder RulesHolder
	// PortHolder tells which service ports the kernel holds.
	PortHolder PortHolder
	// EarlyServer tells when the part that serves first was programmed.
	EarlyServer EarlyServer
	// Sizer sizes what its Preparer creates from the expected size.
	Sizer Sizer
}

// EarlyServer is a Proxier part of whose dataplane serves traffic before
// its Sync returns: ebpf mode's socket hooks translate a connect as soon as
// their maps are written, while the nftables rules of the same sync are
// still being programmed. /healthz and the sync metrics stay the whole
// sync's; the syncer reports this part's time beside them, for operators
// who want to know when connections from the node's pods were served.
type EarlyServer interface {
	// ServedAt is when the last Sync's early part held its whole State,
	// zero when that part did not succeed. The syncer reads it only after
	// a successful Sync.
	ServedAt() time.Time
}

// Preparer is a Proxier whose RecoverySync starts by reading the kernel
// back. ReadBack does only that: it forgets what the Proxier committed and
// reads the kernel's state, so that a FullSync after it needs no second
// read. The syncer calls it ahead of the first sync, while the informers'
// initial lists still arrive (Syncer.Prepare).
type Preparer interface {
	ReadBack(ctx context.Context) error
}

// Sizer is a Preparer that creates, ahead of the first sync, something
// whose size the State decides (ebpf mode's maps), and would otherwise
// create small and grow at the first sync. Before ReadBack the syncer
// hands it how to learn the size the first State is expected to have
// (Options.ExpectedSize); it asks only when it creates something, and
// the asking may wait, within ctx, for the initial lists' first pages.
// An answer with ok false (an API server that did not tell) leaves it to
// size as it did without one.
type Sizer interface {
	ExpectSize(expected func(ctx context.Context) (size proxy.ExpectedSize, ok bool))
}

// RulesHolder is a Preparer that tells, after ReadBack, whether the kernel
// already held rules of its own: a restart, whose rules serve traffic
// while the first sync is prepared, rather than a cold start.
type RulesHolder interface {
	HoldsRules() bool
}

// PortHolder is a Proxier that tells which service ports of a State the
// kernel already holds exactly as the Proxier would program them: every
// object, element and rule of the port present and equal. HeldPorts reads
// the kernel back first, as a RecoverySync does, so that a FullSync right
// after it needs no second read; it programs nothing. The syncer asks only
// after a rejected sync that has no accepted State to search from (the
// first sync of a process): the ports held are the search's base, whose
// sync changes nothing the kernel does for them (isolate.go).
type PortHolder interface {
	HeldPorts(ctx context.Context, state *desired.State) (map[proxy.ServicePortName]struct{}, error)
}
