package app

import (
	"os"
	"runtime/debug"
	"sync"

	"github.com/svcproxy/svcproxy/pkg/pipeline/desired"
	"github.com/svcproxy/svcproxy/pkg/pipeline/model"
	"github.com/svcproxy/svcproxy/pkg/proxy"
)

// steadyGCPercent is the collector's GOGC from the end of the start on,
// unless the environment sets GOGC. A cold start (the kernel held none of
// the rules) keeps the runtime's default, 100, until every family's first
// sync is programmed; a restart switches as soon as its read-back finds the
// rules.
//
// A cold start is an outage until its first sync, and it is bound by CPU:
// the lists, the parse and the first sync build one large structure, and
// collecting each time the heap grows by half instead of doubling costs
// it ≈ 6 % at 10k Services. Everywhere else the rules in the kernel serve
// traffic, and at GOGC 100 the heap between collections is as large again
// as everything live: at 10k × 10 that garbage was a third of the
// daemon's peak RSS, most of all on a restart, which reads the kernel back
// while the lists arrive.
const steadyGCPercent = 50

// gcTuner sets GOGC to steadyGCPercent once the first sync of each of its
// families has been programmed, or as soon as a read-back finds rules in
// the kernel (a restart).
type gcTuner struct {
	mu      sync.Mutex
	pending map[proxy.IPFamily]bool
	lowered bool
	set     func(percent int) int
}

// newGCTuner returns nil when the environment sets GOGC: the operator's
// choice stands.
func newGCTuner(families []proxy.IPFamily) *gcTuner {
	if _, ok := os.LookupEnv("GOGC"); ok {
		return nil
	}
	t := &gcTuner{pending: map[proxy.IPFamily]bool{}, set: debug.SetGCPercent}
	for _, f := range families {
		t.pending[f] = true
	}
	return t
}

// afterSync is the family's AfterSync hook (one that does nothing when t
// is nil).
func (t *gcTuner) afterSync(family proxy.IPFamily) func(*desired.State, model.Changes) {
	if t == nil {
		return func(*desired.State, model.Changes) {}
	}
	return func(*desired.State, model.Changes) { t.synced(family) }
}

// afterReadBack is the syncers' AfterReadBack hook (nil when t is nil).
func (t *gcTuner) afterReadBack() func(rulesHeld bool) {
	if t == nil {
		return nil
	}
	return func(rulesHeld bool) {
		if rulesHeld {
			t.lower()
		}
	}
}

func (t *gcTuner) synced(family proxy.IPFamily) {
	t.mu.Lock()
	delete(t.pending, family)
	done := len(t.pending) == 0
	t.mu.Unlock()
	if done {
		t.lower()
	}
}

func (t *gcTuner) lower() {
	t.mu.Lock()
	defer t.mu.Unlock()
	if !t.lowered {
		t.lowered = true
		t.set(steadyGCPercent)
	}
}
