package model

import (
	"fmt"
	"runtime"
	"slices"
	"strings"
	"testing"
	"unsafe"

	v1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"

	"github.com/svcproxy/svcproxy/pkg/proxy"
)

// BenchmarkTrackerLiveHeap reports the heap a committed tracker holds at
// 10k Services × 10 endpoints (metric live-MB: heap in use after a GC, minus
// before). "bare" slices carry addresses only (like make bench-e2e's seed);
// "located" ones a node name and zone per endpoint, each string a fresh
// allocation as the API decoder makes them (100 nodes, 3 zones).
func BenchmarkTrackerLiveHeap(b *testing.B) {
	for _, located := range []bool{false, true} {
		b.Run(map[bool]string{false: "bare", true: "located"}[located], func(b *testing.B) {
			for b.Loop() {
				before := liveHeap()
				svcs, slices := trackerWorld(10000, 10, located)
				tr := NewTracker(proxy.IPv4)
				for i := range svcs {
					tr.OnServiceUpdate(nil, svcs[i])
					tr.OnEndpointSliceUpdate(nil, slices[i])
				}
				tr.Commit()
				svcs, slices = nil, nil
				b.ReportMetric(float64(liveHeap()-before)/(1<<20), "live-MB")
				runtime.KeepAlive(tr)
			}
		})
	}
}

func liveHeap() uint64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// trackerWorld returns n Services with one port and a slice of e endpoints
// each.
func trackerWorld(n, e int, located bool) ([]*v1.Service, []*discoveryv1.EndpointSlice) {
	svcs := make([]*v1.Service, n)
	slices := make([]*discoveryv1.EndpointSlice, n)
	for i := range n {
		name := fmt.Sprintf("svc-%d", i)
		ip := fmt.Sprintf("172.30.%d.%d", i/256, i%256)
		svcs[i] = makeService("ns", name, func(s *v1.Service) { s.Spec.ClusterIP, s.Spec.ClusterIPs = ip, []string{ip} })
		eps := make([]string, e)
		for j := range eps {
			eps[j] = fmt.Sprintf("10.%d.%d.%d", i/256, i%256, j+1)
		}
		slices[i] = makeSlice("ns", name+"-1", name, eps, func(s *discoveryv1.EndpointSlice) {
			if !located {
				return
			}
			for j := range s.Endpoints {
				node := (i*e + j) % 100
				s.Endpoints[j].NodeName = ptrTo(strings.Clone(fmt.Sprintf("ip-10-0-%d-%d.ec2.internal", node/10, node)))
				s.Endpoints[j].Zone = ptrTo(strings.Clone(fmt.Sprintf("eu-west-1%c", 'a'+node%3)))
			}
		})
	}
	return svcs, slices
}

// An endpoint in a list takes its address and port (32 bytes, shared with
// the desired State's dispatches) and a pointer to an info that the
// endpoints of its node share.
func TestEndpointListElementSizes(t *testing.T) {
	if a, i := unsafe.Sizeof(proxy.Endpoint{}), unsafe.Sizeof(EndpointList{}.infos[0]); a != 32 || i != 8 {
		t.Fatalf("an endpoint takes %d + %d bytes, want 32 + 8", a, i)
	}
}

// twoPorts gives a slice a second port, "dns" 53/UDP.
// sameList reports whether a and b are the same list, not only equal ones.
func sameList(a, b EndpointList) bool {
	return a.Len() > 0 && a.Len() == b.Len() && &a.Addrs()[0] == &b.Addrs()[0] && &a.Infos()[0] == &b.Infos()[0]
}

func twoPorts(s *discoveryv1.EndpointSlice) {
	s.Ports = append(s.Ports, discoveryv1.EndpointPort{Name: ptrTo("dns"), Protocol: ptrTo(v1.ProtocolUDP), Port: ptrTo[int32](53)})
}

// A Service with one slice publishes that slice's own lists, and an update
// that leaves a port's endpoints equal keeps the published list in the
// slice too, so no list is held twice.
func TestTrackerSingleSliceSharesItsLists(t *testing.T) {
	dns := spn("ns", "web", "dns", proxy.UDP)
	tr := NewTracker(proxy.IPv4)
	tr.OnEndpointSliceUpdate(nil, makeSlice("ns", "web-1", "web", []string{"10.0.0.2", "10.0.0.1"}, twoPorts))
	first, _ := tr.Commit()
	published, _ := first.Endpoints.Get(httpPort)
	held := tr.services[proxy.ServiceName{Namespace: "ns", Name: "web"}].slices[0].endpoints
	if own, _ := held.ports.get(keyOf(httpPort)); own.Len() == 0 || !sameList(own, published) {
		t.Fatalf("the snapshot does not share the slice's list")
	}

	// Only dns changes: 53 becomes 54.
	tr.OnEndpointSliceUpdate(nil, makeSlice("ns", "web-1", "web", []string{"10.0.0.1", "10.0.0.2"}, func(s *discoveryv1.EndpointSlice) {
		twoPorts(s)
		s.Ports[1].Port = ptrTo[int32](54)
	}))
	second, ch := tr.Commit()
	if _, ok := ch.Changed[httpPort]; ok || len(ch.Changed) != 1 {
		t.Fatalf("changed %v, want only %v", ch.Changed, dns)
	}
	again, _ := second.Endpoints.Get(httpPort)
	held = tr.services[proxy.ServiceName{Namespace: "ns", Name: "web"}].slices[0].endpoints
	own, _ := held.ports.get(keyOf(httpPort))
	if !sameList(again, published) || !sameList(own, published) {
		t.Fatalf("an unchanged port's list was not kept: snapshot %p, slice %p, published %p", again.Addrs(), own.Addrs(), published.Addrs())
	}
	if got := endpointAddrs(second, dns); !slices.Equal(got, []string{"10.0.0.1:54", "10.0.0.2:54"}) {
		t.Fatalf("dns endpoints %v", got)
	}
	if got := endpointAddrs(first, dns); !slices.Equal(got, []string{"10.0.0.1:53", "10.0.0.2:53"}) {
		t.Fatalf("the previous snapshot changed: %v", got)
	}
}

// Updates and deletes through the shared lists leave nothing stale visible,
// and a Service whose slices are gone leaves nothing behind.
func TestTrackerSharedListsShowNoStaleEndpoint(t *testing.T) {
	svc := proxy.ServiceName{Namespace: "ns", Name: "web"}
	notReady := func(s *discoveryv1.EndpointSlice) { s.Endpoints[1].Conditions.Ready = ptrTo(false) }
	tr := NewTracker(proxy.IPv4)
	tr.OnEndpointSliceUpdate(nil, makeSlice("ns", "web-1", "web", []string{"10.0.0.1", "10.0.0.2"}, nil))
	first, _ := tr.Commit()

	// 10.0.0.1 goes, 10.0.0.2 becomes not ready, 10.0.0.3 comes.
	tr.OnEndpointSliceUpdate(nil, makeSlice("ns", "web-1", "web", []string{"10.0.0.3", "10.0.0.2"}, notReady))
	second, _ := tr.Commit()
	if got := endpointAddrs(second, httpPort); !slices.Equal(got, []string{"10.0.0.2:8080", "10.0.0.3:8080"}) {
		t.Fatalf("after the update: %v", got)
	}
	if eps, _ := second.Endpoints.Get(httpPort); eps.Infos()[0].Ready || !eps.Infos()[1].Ready {
		t.Fatalf("after the update, 10.0.0.2 must be not ready and 10.0.0.3 ready")
	}
	if got := endpointAddrs(first, httpPort); !slices.Equal(got, []string{"10.0.0.1:8080", "10.0.0.2:8080"}) {
		t.Fatalf("the first snapshot changed: %v", got)
	}

	// A second slice with the ready copy of 10.0.0.2 comes and goes.
	tr.OnEndpointSliceUpdate(nil, makeSlice("ns", "web-2", "web", []string{"10.0.0.2"}, nil))
	third, _ := tr.Commit()
	if eps, _ := third.Endpoints.Get(httpPort); eps.Len() != 2 || !eps.Infos()[0].Ready {
		t.Fatalf("with web-2, 10.0.0.2 must be web-2's ready copy")
	}
	tr.OnEndpointSliceUpdate(makeSlice("ns", "web-2", "web", nil, nil), nil)
	fourth, _ := tr.Commit()
	if eps, _ := fourth.Endpoints.Get(httpPort); eps.Len() != 2 || eps.Infos()[0].Ready {
		t.Fatalf("after deleting web-2, 10.0.0.2 must be web-1's not-ready copy again")
	}

	tr.OnEndpointSliceUpdate(makeSlice("ns", "web-1", "web", nil, nil), nil)
	last, ch := tr.Commit()
	if last.Endpoints.Len() != 0 || len(ch.Changed) != 1 {
		t.Fatalf("after deleting every slice: %d endpoint lists, changes %v", last.Endpoints.Len(), ch.Changed)
	}
	if len(tr.services) != 0 || len(tr.sliceOwner) != 0 {
		t.Fatalf("a Service without slices left state behind: %v %v", tr.services[svc], tr.sliceOwner)
	}
}

func TestParseEndpointSliceDeduplicates(t *testing.T) {
	for _, readyFirst := range []bool{true, false} {
		slice := makeSlice("ns", "web-1", "web", []string{"10.0.0.9", "10.0.0.2", "10.0.0.2"}, func(s *discoveryv1.EndpointSlice) {
			s.Endpoints[map[bool]int{true: 2, false: 1}[readyFirst]].Conditions.Ready = ptrTo(false)
		})
		parsed, _, err := parseEndpointSlice(slice, proxy.IPv4, newInterner())
		if err != nil {
			t.Fatal(err)
		}
		eps, _ := parsed.ports.get(keyOf(httpPort))
		if eps.Len() != 2 || eps.Addrs()[0].IP != addrs("10.0.0.2")[0] || !eps.Infos()[0].Ready || eps.Addrs()[1].IP != addrs("10.0.0.9")[0] {
			t.Fatalf("ready listed first=%v: got %v, want the ready 10.0.0.2, then 10.0.0.9", !readyFirst, eps.Addrs())
		}
	}
}

func TestParseEndpointSliceDropsPortsWithoutEndpoints(t *testing.T) {
	parsed, _, err := parseEndpointSlice(makeSlice("ns", "web-1", "web", nil, nil), proxy.IPv4, newInterner())
	if err != nil || len(parsed.ports) != 0 {
		t.Fatalf("err %v, ports %v; want none", err, parsed.ports)
	}
}

// Endpoints of one node in the same condition share one info, rather than
// each holding the strings its API object was decoded with, and the ports
// of one slice share the list of infos.
func TestParsedEndpointsShareInfos(t *testing.T) {
	located := func(s *discoveryv1.EndpointSlice) {
		twoPorts(s)
		for i := range s.Endpoints {
			s.Endpoints[i].NodeName = ptrTo(strings.Clone("node-a"))
			s.Endpoints[i].Zone = ptrTo(strings.Clone("zone-a"))
			s.Endpoints[i].Hints = &discoveryv1.EndpointHints{ForZones: []discoveryv1.ForZone{{Name: strings.Clone("zone-a")}}}
		}
	}
	in := newInterner()
	var all []*EndpointInfo
	for i := range 2 {
		parsed, _, err := parseEndpointSlice(makeSlice("ns", fmt.Sprint("web-", i), "web", []string{"10.0.0.1", "10.0.0.2"}, located), proxy.IPv4, in)
		if err != nil {
			t.Fatal(err)
		}
		http, _ := parsed.ports.get(keyOf(httpPort))
		dns, _ := parsed.ports.get(keyOf(spn("ns", "web", "dns", proxy.UDP)))
		if &http.Infos()[0] != &dns.Infos()[0] {
			t.Fatalf("the ports of one slice do not share their endpoints' infos")
		}
		all = append(all, http.Infos()...)
	}
	first := all[0]
	want := EndpointInfo{NodeName: "node-a", Zone: "zone-a", ZoneHints: []string{"zone-a"}, Ready: true, Serving: true}
	if !first.Equal(&want) {
		t.Fatalf("info %+v, want %+v", *first, want)
	}
	for _, info := range all[1:] {
		if info != first {
			t.Fatalf("info %+v is not shared with %+v", *info, *first)
		}
	}
}

// Infos that differ in any part are not shared; a hint named "" is a hint.
func TestInternedInfosTellApart(t *testing.T) {
	in := newInterner()
	base := EndpointInfo{NodeName: "node-a", Ready: true, Serving: true}
	variants := []EndpointInfo{base}
	for _, edit := range []func(*EndpointInfo){
		func(i *EndpointInfo) { i.NodeName = "node-b" },
		func(i *EndpointInfo) { i.Zone = "zone-a" },
		func(i *EndpointInfo) { i.ZoneHints = []string{""} },
		func(i *EndpointInfo) { i.NodeHints = []string{""} },
		func(i *EndpointInfo) { i.Ready = false },
		func(i *EndpointInfo) { i.Serving = false },
		func(i *EndpointInfo) { i.Terminating = true },
	} {
		v := base
		edit(&v)
		variants = append(variants, v)
	}
	seen := map[*EndpointInfo]int{}
	for i, v := range variants {
		got := in.info(v)
		if !got.Equal(&v) {
			t.Fatalf("info(%+v) = %+v", v, *got)
		}
		if j, dup := seen[got]; dup {
			t.Fatalf("variants %d and %d share %+v", j, i, *got)
		}
		seen[got] = i
		if again := in.info(v); again != got {
			t.Fatalf("info(%+v) is not shared", v)
		}
	}
	two := EndpointInfo{ZoneHints: []string{"zone-a", "zone-b"}}
	if got := in.info(two); !got.Equal(&two) {
		t.Fatalf("two zone hints: %+v", *got)
	}
}

func TestInternerStartsOverAtItsBound(t *testing.T) {
	in := newInterner()
	for i := range maxInterned + 10 {
		name := fmt.Sprint("node-", i)
		if got := in.str(name); got != name {
			t.Fatalf("str(%q) = %q", name, got)
		}
		want := EndpointInfo{NodeName: name, ZoneHints: []string{name}, Ready: true}
		if got := in.info(want); !got.Equal(&want) {
			t.Fatalf("info(%+v) = %+v", want, *got)
		}
	}
	if len(in.strings) > maxInterned || len(in.lists) > maxInterned || len(in.infos) > maxInterned {
		t.Fatalf("interner holds %d strings, %d lists and %d infos, bound %d", len(in.strings), len(in.lists), len(in.infos), maxInterned)
	}
}

func TestEmptied(t *testing.T) {
	for _, n := range []int{3, 300} {
		m := map[int]bool{}
		for i := range n {
			m[i] = true
		}
		if got := emptied(m); len(got) != 0 || got == nil {
			t.Fatalf("emptied map of %d: %v", n, got)
		}
	}
}

// The tracker holds one record per Service while anything of it is
// published or any of its slices is seen, and none after.
func TestTrackerForgetsAServiceWhenNothingIsLeft(t *testing.T) {
	svc := proxy.ServiceName{Namespace: "ns", Name: "web"}
	tr := NewTracker(proxy.IPv4)
	tr.OnServiceUpdate(nil, makeService("ns", "web", nil))
	tr.OnEndpointSliceUpdate(nil, makeSlice("ns", "web-1", "web", []string{"10.0.0.1"}, nil))
	tr.Commit()
	tr.OnServiceUpdate(makeService("ns", "web", nil), nil)
	tr.Commit()
	if r := tr.services[svc]; r == nil || len(r.ports) != 0 || len(r.slices) != 1 || len(r.eps) != 1 {
		t.Fatalf("with the Service deleted and its slice left: record %+v, want the slice and its endpoints", r)
	}
	tr.OnEndpointSliceUpdate(makeSlice("ns", "web-1", "web", nil, nil), nil)
	if r := tr.services[svc]; r == nil || len(r.eps) != 1 {
		t.Fatalf("before the Commit, the published endpoints must stay: record %+v", r)
	}
	snap, _ := tr.Commit()
	if len(tr.services) != 0 || len(tr.sliceOwner) != 0 || snap.Endpoints.Len() != 0 || snap.Services.Len() != 0 {
		t.Fatalf("after deleting everything: records %v, owners %v, snapshot %d/%d", tr.services, tr.sliceOwner, snap.Services.Len(), snap.Endpoints.Len())
	}
}

func TestServicePortSize(t *testing.T) {
	if got := unsafe.Sizeof(ServicePort{}); got > 192 {
		t.Fatalf("ServicePort takes %d bytes, want at most 192 (the next size class is 208)", got)
	}
}
