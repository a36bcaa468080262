package app

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/svcproxy/svcproxy/internal/backends"
	"github.com/svcproxy/svcproxy/pkg/pipeline/desired"
	"github.com/svcproxy/svcproxy/pkg/pipeline/watch"
	"github.com/svcproxy/svcproxy/pkg/proxy"
)

// TestListSizesExpected: a family's expected size waits for both lists'
// sizes and scales their first pages to the lists' lengths; a size the
// API server did not tell, or a wait that ends first, answers none.
func TestListSizesExpected(t *testing.T) {
	svc := watch.ListSize{Kind: "Service", Known: true, Objects: 10000, Sampled: 2000,
		Units: map[proxy.IPFamily]int{proxy.IPv4: 2000, proxy.IPv6: 1000}}
	slices := watch.ListSize{Kind: "EndpointSlice", Known: true, Objects: 10000, Sampled: 2000,
		Units: map[proxy.IPFamily]int{proxy.IPv4: 20000}}

	l := newListSizes()
	l.sized(svc)
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if size, ok := l.expected(proxy.IPv4)(ctx); ok {
		t.Errorf("with only the Services' size, expected %+v, want none", size)
	}
	l.sized(slices)
	l.sized(watch.ListSize{Kind: "EndpointSlice"}) // a second report changes nothing
	want := proxy.ExpectedSize{ServicePorts: 10000, EndpointPorts: 100000}
	if size, ok := l.expected(proxy.IPv4)(context.Background()); !ok || size != want {
		t.Errorf("IPv4 expected %+v (%v), want %+v", size, ok, want)
	}
	want = proxy.ExpectedSize{ServicePorts: 5000}
	if size, ok := l.expected(proxy.IPv6)(context.Background()); !ok || size != want {
		t.Errorf("IPv6 expected %+v (%v), want %+v", size, ok, want)
	}

	l = newListSizes()
	l.sized(svc)
	l.sized(watch.ListSize{Kind: "EndpointSlice"})
	if size, ok := l.expected(proxy.IPv4)(context.Background()); ok {
		t.Errorf("with the slices' size unknown, expected %+v, want none", size)
	}
}

// TestFeedReportsListSizes: the feed's informers report the initial lists'
// sizes to the feed's listSizes: the fake API server's one Service port
// and one endpoint, a whole list in one page.
func TestFeedReportsListSizes(t *testing.T) {
	cfg := mustRun(t, "--hostname-override=n1", "--proxy-mode=nftables", "--state-socket=")
	cfg.Mode = testMode
	failures := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "test_sync_failures_total", Help: "test"}, []string{"ip_family"})
	reg := backends.Registry{testRow(&rowProxier{synced: map[proxy.IPFamily]*desired.State{}}, failures, &leftoverLog{})}
	d := rowDaemon(t, cfg, reg)
	feed, err := d.startFeed(t.Context(), []proxy.IPFamily{proxy.IPv4})
	if err != nil {
		t.Fatal(err)
	}
	want := proxy.ExpectedSize{ServicePorts: 1, EndpointPorts: 1}
	if size, ok := feed.sizes.expected(proxy.IPv4)(t.Context()); !ok || size != want {
		t.Errorf("expected %+v (%v), want %+v", size, ok, want)
	}
}
