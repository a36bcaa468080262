package proxy

import "errors"

// SyncMode says how much of the kernel a backend's Sync reconciles. Only the
// syncer (pkg/pipeline/syncer) decides it; a backend obeys it and reports, with
// ErrStateLost, ErrFullSyncNeeded or ErrNotApplied, what the syncer must
// know to decide the next one.
type SyncMode uint8

// The sync modes, from the cheapest.
const (
	// PartialSync: only the service ports in State.Changed differ from the
	// State of the previous successful Sync; nothing else does.
	PartialSync SyncMode = iota
	// FullSync: render every service port and the shared objects, and
	// apply the difference from what the backend last committed.
	FullSync
	// RecoverySync is a FullSync that first forgets what the backend
	// believes the kernel holds and reads the kernel again: the first
	// sync, and every sync after a failure, a lost canary or
	// ErrStateLost.
	RecoverySync
)

// Full reports whether m reconciles everything.
func (m SyncMode) Full() bool { return m != PartialSync }

// String names the mode for logs.
func (m SyncMode) String() string {
	switch m {
	case PartialSync:
		return "partial"
	case FullSync:
		return "full"
	case RecoverySync:
		return "recovery"
	}
	return "unknown"
}

// ErrStateLost is wrapped by the error of a Sync that programmed the State
// it was given but leaves the backend's record of the kernel untrustworthy
// (nftables: stale objects it failed to delete). The syncer counts the sync
// as done and makes the next one a RecoverySync.
var ErrStateLost = errors.New("the backend's record of the kernel is lost")

// ErrFullSyncNeeded is wrapped by the error of a PartialSync that a backend
// refused without touching the kernel, because something the State does not
// carry changed what every rule looks like (iptables: large-cluster mode).
// The syncer retries at once with a FullSync.
var ErrFullSyncNeeded = errors.New("a partial sync cannot be applied; a full one is needed")

// ErrNotApplied is wrapped by the error of a Sync the kernel refused
// before any of it took effect: the kernel holds what it held after the
// backend's last successful Sync, and the backend's record of it is still
// exact. The syncer may then go on from that State with a PartialSync
// rather than a RecoverySync.
var ErrNotApplied = errors.New("the sync was refused before any of it was applied")
