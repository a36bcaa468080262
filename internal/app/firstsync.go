package app

import (
	"sync"

	"github.com/svcproxy/svcproxy/pkg/pipeline/desired"
	"github.com/svcproxy/svcproxy/pkg/pipeline/model"
	"github.com/svcproxy/svcproxy/pkg/proxy"
)

// firstSyncs tells when every IP family of this process has programmed the
// kernel once: done is closed then. What waits for it must not run before
// this mode's rules are live.
type firstSyncs struct {
	mu      sync.Mutex
	pending map[proxy.IPFamily]bool
	done    chan struct{}
}

func newFirstSyncs(families []proxy.IPFamily) *firstSyncs {
	f := &firstSyncs{pending: make(map[proxy.IPFamily]bool, len(families)), done: make(chan struct{})}
	for _, family := range families {
		f.pending[family] = true
	}
	if len(f.pending) == 0 {
		close(f.done)
	}
	return f
}

// afterSync is a syncer's AfterSync hook for family: it runs after each of
// the family's successful syncs.
func (f *firstSyncs) afterSync(family proxy.IPFamily) func(*desired.State, model.Changes) {
	return func(*desired.State, model.Changes) {
		f.mu.Lock()
		defer f.mu.Unlock()
		if !f.pending[family] {
			return
		}
		delete(f.pending, family)
		if len(f.pending) == 0 {
			close(f.done)
		}
	}
}
