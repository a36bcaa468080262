package app

import (
	"context"
	"testing"
	"time"

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
