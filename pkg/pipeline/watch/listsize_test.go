package watch

import (
	"context"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/svcproxy/svcproxy/pkg/proxy"
)

// sizedList lists api's Services once through transport, with a sampler
// whose count goes through the client without a rate limiter, and returns
// the size it reported.
func sizedList(t *testing.T, transport string, api *pagedServices, selector string) ListSize {
	t.Helper()
	api.parsed = new(int)
	w := &Informers{targets: []Target{{Tracker: &countingTracker{delivered: map[string]bool{}}}}}
	lw := pagedListOver(t, transport, api, func(o *metav1.ListOptions) { o.LabelSelector = selector }, w.parseService)
	sized := make(chan ListSize, 2)
	lw.sampler = &listSampler{kind: "Service", measure: servicePorts, count: countObjects[*v1.ServiceList](unlimited{api}),
		sized: func(s ListSize) { sized <- s }}
	for range 2 { // a relist reports nothing more
		if _, err := lw.ListWithContext(context.Background(), metav1.ListOptions{ResourceVersion: "0"}); err != nil {
			t.Fatal(err)
		}
	}
	var got ListSize
	select {
	case got = <-sized:
	case <-time.After(10 * time.Second):
		t.Fatal("no size reported")
	}
	select {
	case again := <-sized:
		t.Errorf("a second size reported: %+v", again)
	case <-time.After(50 * time.Millisecond):
	}
	return got
}

// TestListSizeFromFirstPage: the size of a list of 2 pages and 234
// Services of 2 ports each is reported once, from its first page, by
// whichever source says the list's length: the page's remainingItemCount;
// without it (the API server's answer to a list with a label selector),
// a list of one object without the selector, asked through the client
// without a rate limiter; a list of one page, its own length; none of
// them, an unknown size, whose estimate is 0.
func TestListSizeFromFirstPage(t *testing.T) {
	n := 2*ListPageSize + 234
	for _, tc := range []struct {
		name  string
		n     int
		count countRule
		known bool
		// counted is whether a count was asked.
		counted bool
	}{
		{"remaining count", n, countAlways, true, false},
		{"count without the selector", n, countUnselected, true, true},
		{"one page", 300, countNever, true, false},
		{"no count", n, countNever, false, true},
	} {
		for _, transport := range pageTransports {
			t.Run(tc.name+"/"+transport, func(t *testing.T) {
				api := &pagedServices{n: tc.n, rv: "5", ports: 2, count: tc.count}
				got := sizedList(t, transport, api, "x!=y")
				sampled, objects, ports := min(tc.n, ListPageSize), tc.n, 2*tc.n
				if !tc.known {
					sampled, objects, ports = 0, 0, 0
				}
				if got.Kind != "Service" || got.Known != tc.known || got.Sampled != sampled || got.Objects != objects {
					t.Errorf("reported %+v, want known %v, %d sampled of %d", got, tc.known, sampled, objects)
				}
				if e := got.Estimate(proxy.IPv4); e != ports {
					t.Errorf("estimated %d IPv4 service ports, want %d", e, ports)
				}
				api.mu.Lock()
				defer api.mu.Unlock()
				var counts []metav1.ListOptions
				for i, o := range api.calls {
					if o.Limit == 1 {
						counts = append(counts, o)
						if o.LabelSelector != "" || api.via[i] != "unlimited" {
							t.Errorf("counted with %+v through the %s client, want no selector, the unlimited client", o, api.via[i])
						}
					}
				}
				if (len(counts) > 0) != tc.counted || len(counts) > 1 {
					t.Errorf("%d counts asked, want one: %v", len(counts), tc.counted)
				}
			})
		}
	}
}

// TestListSizeUnits: what a first page's objects count for, per family:
// each port of a Service per family of its cluster IPs (none for a
// headless or ExternalName Service), and each endpoint and port pair of a
// slice for the slice's family (an endpoint without ports counts once).
func TestListSizeUnits(t *testing.T) {
	units := map[proxy.IPFamily]int{}
	ports := []v1.ServicePort{{Port: 80}, {Port: 443}}
	for _, spec := range []v1.ServiceSpec{
		{ClusterIP: "10.0.0.1", ClusterIPs: []string{"10.0.0.1", "fd00::1"}, Ports: ports},
		{ClusterIP: "10.0.0.2", Ports: ports[:1]},
		{ClusterIP: "None", ClusterIPs: []string{"None"}, Ports: ports},
		{Type: v1.ServiceTypeExternalName, Ports: ports},
	} {
		servicePorts(&v1.Service{Spec: spec}, units)
	}
	if units[proxy.IPv4] != 3 || units[proxy.IPv6] != 2 {
		t.Errorf("service ports counted %v, want 3 IPv4 and 2 IPv6", units)
	}
	units = map[proxy.IPFamily]int{}
	eps := []discoveryv1.Endpoint{{Addresses: []string{"a"}}, {Addresses: []string{"b"}}, {Addresses: []string{"c"}}}
	for _, s := range []discoveryv1.EndpointSlice{
		{AddressType: discoveryv1.AddressTypeIPv4, Endpoints: eps, Ports: make([]discoveryv1.EndpointPort, 2)},
		{AddressType: discoveryv1.AddressTypeIPv6, Endpoints: eps[:1]},
		{AddressType: discoveryv1.AddressTypeFQDN, Endpoints: eps},
	} {
		endpointPorts(&s, units)
	}
	if units[proxy.IPv4] != 6 || units[proxy.IPv6] != 1 || len(units) != 2 {
		t.Errorf("endpoint ports counted %v, want 6 IPv4 and 1 IPv6", units)
	}
}
