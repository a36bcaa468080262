package reconcile

import (
	"fmt"

	"github.com/svcproxy/svcproxy/pkg/proxy"
)

// Syncs turns the syncer's proxy.SyncMode into what the tables must do,
// the same way for every backend:
//
//   - a partial sync replaces the claims of the changed owners only, and
//     diffs the keys they touch;
//   - a full sync drops every claim (ResetClaims), claims everything
//     again and diffs every key, claimed or in the kernel: what nobody
//     claims any more goes;
//   - a recovery sync is a full sync after the kernel side is read again
//     (ForgetKernel, then the backend's read-back): the first sync of a
//     process, which so adopts an unchanged kernel with no write at all,
//     and the sync after any failure, whose kernel side may be wrong.
//
// Until a read-back has succeeded the tables' kernel side is not to be
// trusted, so a partial sync is refused with proxy.ErrFullSyncNeeded
// (nothing is touched) and the syncer redoes it full at once.
type Syncs struct {
	// read is set once the kernel side is read back and every change
	// since has committed.
	read bool
}

// Plan is what one sync does to the tables.
type Plan struct {
	// ReadBack: forget the kernel side and read it again first.
	ReadBack bool
	// Full: drop every claim and claim everything again.
	Full bool
}

// Begin returns the plan of a sync of mode, or an error wrapping
// proxy.ErrFullSyncNeeded for a partial sync while the kernel side is not
// read back. what names the backend and family for the error.
func (s *Syncs) Begin(mode proxy.SyncMode, what string) (Plan, error) {
	if mode == proxy.RecoverySync {
		s.read = false
	}
	if !mode.Full() && !s.read {
		return Plan{}, fmt.Errorf("%s: the kernel's objects are not read back: %w", what, proxy.ErrFullSyncNeeded)
	}
	return Plan{ReadBack: !s.read, Full: mode.Full()}, nil
}

// ReadDone records a successful read-back.
func (s *Syncs) ReadDone() { s.read = true }

// Failed records a failed sync or read-back: whatever failed may have been
// changed behind this process's back, so the next sync reads the kernel
// again (the syncer makes it a recovery sync).
func (s *Syncs) Failed() { s.read = false }

// Read reports whether the kernel side is read back and trusted.
func (s *Syncs) Read() bool { return s.read }
