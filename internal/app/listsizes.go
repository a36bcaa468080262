package app

import (
	"context"
	"sync"
	"time"

	"github.com/svcproxy/svcproxy/pkg/pipeline/watch"
	"github.com/svcproxy/svcproxy/pkg/proxy"
)

// listSizeWait bounds how long a backend that sizes what it prepares
// waits for the initial lists' first pages: an API server that does not
// answer them holds the first sync anyway, but a page that fails again and
// again should not hold a load that could be done meanwhile.
const listSizeWait = 5 * time.Second

// listSizes collects the initial lists' sizes, which the watch reports
// from their first pages (watch.Options.ListSized), and answers the
// families' expected sizes (syncer.Options.ExpectedSize) once both kinds
// reported.
type listSizes struct {
	mu    sync.Mutex
	sizes map[string]watch.ListSize
	// both is closed once the Service and the EndpointSlice list sizes
	// are in.
	both chan struct{}
}

func newListSizes() *listSizes {
	return &listSizes{sizes: map[string]watch.ListSize{}, both: make(chan struct{})}
}

// sized is watch.Options.ListSized.
func (l *listSizes) sized(s watch.ListSize) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, ok := l.sizes[s.Kind]; ok {
		return
	}
	l.sizes[s.Kind] = s
	if len(l.sizes) == 2 {
		close(l.both)
	}
}

// expected returns family's syncer.Options.ExpectedSize: it waits for
// both sizes (at most listSizeWait) and scales their first pages' counts
// to the lists' lengths; ok is false when either size is unknown or did
// not come in time.
func (l *listSizes) expected(family proxy.IPFamily) func(context.Context) (proxy.ExpectedSize, bool) {
	return func(ctx context.Context) (proxy.ExpectedSize, bool) {
		t := time.NewTimer(listSizeWait)
		defer t.Stop()
		select {
		case <-l.both:
		case <-t.C:
			return proxy.ExpectedSize{}, false
		case <-ctx.Done():
			return proxy.ExpectedSize{}, false
		}
		l.mu.Lock()
		defer l.mu.Unlock()
		svc, slices := l.sizes["Service"], l.sizes["EndpointSlice"]
		if !svc.Known || !slices.Known {
			return proxy.ExpectedSize{}, false
		}
		return proxy.ExpectedSize{ServicePorts: svc.Estimate(family), EndpointPorts: slices.Estimate(family)}, true
	}
}
