package syncer

import (
	"time"

	"k8s.io/klog/v2"

	"github.com/svcproxy/svcproxy/pkg/proxy"
)

// stagesLogLevel is the verbosity of the per-sync "Sync stages" line: one
// line per sync, for finding where one change's latency goes (API server
// and watch, the wait for the loop, commit, compute, the backend, what
// follows) on a live node, without a profiler.
const stagesLogLevel = 4

// stages are the moments of one sync attempt.
type stages struct {
	// requested is when the first request this sync serves was made;
	// zero when it serves none (the periodic sync, a retry).
	requested                              time.Time
	start, committed, computed, programmed time.Time
	// firstTrigger is the oldest trigger time of the changes taken.
	firstTrigger time.Time
}

// markRequested records now as the first unserved request, unless an
// earlier one is still unserved.
func (s *Syncer) markRequested(now time.Time) {
	s.requestedAt.CompareAndSwap(0, now.UnixNano())
}

// takeRequested returns the first unserved request's time (zero if none)
// and marks every request so far as served.
func (s *Syncer) takeRequested() time.Time {
	if ns := s.requestedAt.Swap(0); ns != 0 {
		return time.Unix(0, ns)
	}
	return time.Time{}
}

// log writes the stages of a successful sync that ended (with what
// follows it) at done.
func (st *stages) log(family string, mode proxy.SyncMode, changed int, done time.Time) {
	logger := klog.V(stagesLogLevel)
	if !logger.Enabled() {
		return
	}
	kv := []any{"ipFamily", family, "mode", mode.String(), "changed", changed,
		"commit", st.committed.Sub(st.start), "compute", st.computed.Sub(st.committed),
		"backend", st.programmed.Sub(st.computed), "after", done.Sub(st.programmed)}
	if !st.requested.IsZero() {
		kv = append(kv, "waited", st.start.Sub(st.requested))
	}
	if !st.firstTrigger.IsZero() && !st.requested.IsZero() {
		kv = append(kv, "triggerToRequest", st.requested.Sub(st.firstTrigger))
	}
	logger.InfoS("Sync stages", kv...)
}
