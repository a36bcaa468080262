package model

import (
	"maps"
	"slices"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"

	"github.com/svcproxy/svcproxy/pkg/proxy"
)

var httpPort = spn("ns", "web", "http", proxy.TCP)

func TestTrackerServiceAddUpdateDelete(t *testing.T) {
	tr := NewTracker(proxy.IPv4)
	svc := makeService("ns", "web", nil)
	if !tr.OnServiceUpdate(nil, svc) {
		t.Fatalf("add must need a sync")
	}
	snap, ch := tr.Commit()
	checkSnapshot(t, snap)
	sp, ok := snap.Services.Get(httpPort)
	if !ok || sp.Port != 80 || !slices.Equal(sp.ClusterIPs, addrs("172.30.0.1")) {
		t.Fatalf("after add: got %+v, %v", sp, ok)
	}
	if !maps.Equal(ch.Changed, changedSet(httpPort)) {
		t.Fatalf("after add: changes %+v", ch)
	}

	updated := makeService("ns", "web", func(s *v1.Service) { s.Spec.Ports[0].Port = 81 })
	if !tr.OnServiceUpdate(svc, updated) {
		t.Fatalf("port change must need a sync")
	}
	snap2, ch := tr.Commit()
	if sp, _ := snap2.Services.Get(httpPort); sp.Port != 81 {
		t.Fatalf("after update: port %d, want 81", sp.Port)
	}
	if sp, _ := snap.Services.Get(httpPort); sp.Port != 80 {
		t.Fatalf("the previous snapshot changed: port %d, want 80", sp.Port)
	}
	if !maps.Equal(ch.Changed, changedSet(httpPort)) {
		t.Fatalf("after update: changes %+v", ch.Changed)
	}

	if !tr.OnServiceUpdate(updated, nil) {
		t.Fatalf("delete must need a sync")
	}
	snap3, ch := tr.Commit()
	if snap3.Services.Len() != 0 || !maps.Equal(ch.Changed, changedSet(httpPort)) {
		t.Fatalf("after delete: %d services, changes %+v", snap3.Services.Len(), ch.Changed)
	}
}

func TestTrackerIrrelevantUpdateNeedsNoSync(t *testing.T) {
	tr := NewTracker(proxy.IPv4)
	svc := makeService("ns", "web", nil)
	tr.OnServiceUpdate(nil, svc)
	tr.Commit()
	relabelled := makeService("ns", "web", func(s *v1.Service) { s.Labels = map[string]string{"a": "b"} })
	if tr.OnServiceUpdate(svc, relabelled) {
		t.Fatalf("a label change must not need a sync")
	}
	_, ch := tr.Commit()
	if len(ch.Changed) != 0 {
		t.Fatalf("changes %+v, want none changed", ch)
	}
}

func TestTrackerABACancels(t *testing.T) {
	tr := NewTracker(proxy.IPv4)
	a := makeService("ns", "web", nil)
	b := makeService("ns", "web", func(s *v1.Service) { s.Spec.Ports[0].Port = 81 })
	sliceA := makeSlice("ns", "web-1", "web", []string{"10.0.0.1"}, nil)
	sliceB := makeSlice("ns", "web-1", "web", []string{"10.0.0.2"}, nil)
	tr.OnServiceUpdate(nil, a)
	tr.OnEndpointSliceUpdate(nil, sliceA)
	first, _ := tr.Commit()

	tr.OnServiceUpdate(a, b)
	tr.OnEndpointSliceUpdate(sliceA, sliceB)
	if s, e := tr.Pending(); s != 1 || e != 1 {
		t.Fatalf("pending after A→B = %d, %d; want 1, 1", s, e)
	}
	if tr.OnServiceUpdate(b, a) || tr.OnEndpointSliceUpdate(sliceB, sliceA) {
		t.Fatalf("B→A must not need a sync")
	}
	if s, e := tr.Pending(); s != 0 || e != 0 {
		t.Fatalf("pending after A→B→A = %d, %d; want 0, 0", s, e)
	}
	second, ch := tr.Commit()
	if len(ch.Changed) != 0 {
		t.Fatalf("A→B→A changes %+v; want nothing changed", ch)
	}
	sp1, _ := first.Services.Get(httpPort)
	sp2, _ := second.Services.Get(httpPort)
	eps1, _ := first.Endpoints.Get(httpPort)
	eps2, _ := second.Endpoints.Get(httpPort)
	if sp1 != sp2 || &eps1.Addrs()[0] != &eps2.Addrs()[0] || &eps1.Infos()[0] != &eps2.Infos()[0] {
		t.Fatalf("unchanged values must keep their pointers")
	}
}

func TestTrackerKeepsPointersOfUntouchedServices(t *testing.T) {
	tr := NewTracker(proxy.IPv4)
	tr.OnServiceUpdate(nil, makeService("ns", "web", nil))
	tr.OnServiceUpdate(nil, makeService("ns", "db", func(s *v1.Service) { s.Spec.ClusterIP = "172.30.0.2"; s.Spec.ClusterIPs = nil }))
	first, _ := tr.Commit()
	tr.OnServiceUpdate(nil, makeService("ns", "web", func(s *v1.Service) { s.Spec.Ports[0].Port = 81 }))
	second, ch := tr.Commit()
	db := spn("ns", "db", "http", proxy.TCP)
	a, _ := first.Services.Get(db)
	b, _ := second.Services.Get(db)
	if a == nil || a != b {
		t.Fatalf("untouched service lost its pointer: %p vs %p", a, b)
	}
	if _, ok := ch.Changed[db]; ok {
		t.Fatalf("untouched service reported as changed")
	}
}

func TestTrackerEndpointsAndOverlappingSlices(t *testing.T) {
	tr := NewTracker(proxy.IPv4)
	notReady := func(s *discoveryv1.EndpointSlice) {
		s.Endpoints[0].Conditions.Ready = ptrTo(false)
	}
	// Both slices list 10.0.0.2; only slice "b" has it ready.
	tr.OnEndpointSliceUpdate(nil, makeSlice("ns", "a", "web", []string{"10.0.0.2", "10.0.0.1"}, notReady))
	tr.OnEndpointSliceUpdate(nil, makeSlice("ns", "b", "web", []string{"10.0.0.2", "10.0.0.3"}, nil))
	snap, ch := tr.Commit()
	checkSnapshot(t, snap)
	want := []string{"10.0.0.1:8080", "10.0.0.2:8080", "10.0.0.3:8080"}
	if got := endpointAddrs(snap, httpPort); !slices.Equal(got, want) {
		t.Fatalf("endpoints %v, want %v", got, want)
	}
	eps, _ := snap.Endpoints.Get(httpPort)
	if !eps.Infos()[1].Ready {
		t.Fatalf("the ready copy of a duplicate endpoint must win")
	}
	if !maps.Equal(ch.Changed, changedSet(httpPort)) {
		t.Fatalf("changes %+v", ch)
	}

	// Deleting one slice keeps the other's endpoints.
	tr.OnEndpointSliceUpdate(makeSlice("ns", "b", "web", nil, nil), nil)
	snap, _ = tr.Commit()
	want = []string{"10.0.0.1:8080", "10.0.0.2:8080"}
	if got := endpointAddrs(snap, httpPort); !slices.Equal(got, want) {
		t.Fatalf("after deleting slice b: %v, want %v", got, want)
	}
	eps, _ = snap.Endpoints.Get(httpPort)
	if !eps.Infos()[0].Ready || eps.Infos()[1].Ready {
		t.Fatalf("after deleting slice b, 10.0.0.2 must be slice a's not-ready copy")
	}
}

func TestTrackerDedupIsOrderIndependent(t *testing.T) {
	notReady := func(s *discoveryv1.EndpointSlice) { s.Endpoints[0].Conditions.Ready = ptrTo(false) }
	a := makeSlice("ns", "a", "web", []string{"10.0.0.2"}, nil)
	b := makeSlice("ns", "b", "web", []string{"10.0.0.2"}, notReady)
	for _, order := range [][]*discoveryv1.EndpointSlice{{a, b}, {b, a}} {
		tr := NewTracker(proxy.IPv4)
		for _, s := range order {
			tr.OnEndpointSliceUpdate(nil, s)
		}
		snap, _ := tr.Commit()
		eps, _ := snap.Endpoints.Get(httpPort)
		if eps.Len() != 1 || !eps.Infos()[0].Ready {
			t.Fatalf("order %s,%s: got %d endpoints, want one ready", order[0].Name, order[1].Name, eps.Len())
		}
	}
}

func TestTrackerIgnoresOtherFamiliesAndFQDN(t *testing.T) {
	tr := NewTracker(proxy.IPv4)
	v6 := makeSlice("ns", "v6", "web", []string{"fd00:10::1"}, func(s *discoveryv1.EndpointSlice) {
		s.AddressType = discoveryv1.AddressTypeIPv6
	})
	fqdn := makeSlice("ns", "fqdn", "web", []string{"example.com"}, func(s *discoveryv1.EndpointSlice) {
		s.AddressType = discoveryv1.AddressTypeFQDN
	})
	v6svc := makeService("ns", "v6only", func(s *v1.Service) {
		s.Spec.ClusterIP = "fd00:30::1"
		s.Spec.ClusterIPs = []string{"fd00:30::1"}
	})
	if tr.OnEndpointSliceUpdate(nil, v6) || tr.OnEndpointSliceUpdate(nil, fqdn) || tr.OnServiceUpdate(nil, v6svc) {
		t.Fatalf("objects of another family must not need a sync")
	}
	snap, ch := tr.Commit()
	if snap.Endpoints.Len() != 0 || snap.Services.Len() != 0 || len(ch.Changed) != 0 {
		t.Fatalf("other-family objects leaked: %d endpoints, %d services, changes %v",
			snap.Endpoints.Len(), snap.Services.Len(), ch.Changed)
	}

	tr6 := NewTracker(proxy.IPv6)
	tr6.OnEndpointSliceUpdate(nil, v6)
	dual := makeService("ns", "web", func(s *v1.Service) {
		s.Spec.ClusterIPs = []string{"172.30.0.1", "fd00:30::1"}
		s.Spec.ExternalIPs = []string{"203.0.113.1", "2001:db8::1"}
	})
	tr6.OnServiceUpdate(nil, dual)
	snap, _ = tr6.Commit()
	checkSnapshot(t, snap)
	sp, _ := snap.Services.Get(httpPort)
	if sp == nil || !slices.Equal(sp.ClusterIPs, addrs("fd00:30::1")) || !slices.Equal(sp.ExternalIPs, addrs("2001:db8::1")) {
		t.Fatalf("IPv6 tracker got %+v", sp)
	}
	if got := endpointAddrs(snap, httpPort); !slices.Equal(got, []string{"[fd00:10::1]:8080"}) {
		t.Fatalf("IPv6 endpoints %v", got)
	}
}

func TestTrackerInvalidObjectsAffectNothingElse(t *testing.T) {
	tr := NewTracker(proxy.IPv4)
	tr.OnServiceUpdate(nil, makeService("ns", "web", nil))
	tr.OnEndpointSliceUpdate(nil, makeSlice("ns", "web-1", "web", []string{"10.0.0.1"}, nil))
	before, _ := tr.Commit()

	noLabel := makeSlice("ns", "orphan", "x", []string{"10.0.0.9"}, func(s *discoveryv1.EndpointSlice) { s.Labels = nil })
	badIP := makeSlice("ns", "bad", "web", []string{"not-an-ip", "10.0.0.2"}, nil)
	badPort := makeSlice("ns", "badport", "web", []string{"10.0.0.3"}, func(s *discoveryv1.EndpointSlice) {
		s.Ports[0].Port = ptrTo[int32](70000)
	})
	badSvc := makeService("ns", "broken", func(s *v1.Service) { s.Spec.ClusterIP = "garbage"; s.Spec.ClusterIPs = nil })
	tr.OnEndpointSliceUpdate(nil, noLabel)
	tr.OnEndpointSliceUpdate(nil, badIP)
	tr.OnEndpointSliceUpdate(nil, badPort)
	tr.OnServiceUpdate(nil, badSvc)
	after, _ := tr.Commit()
	checkSnapshot(t, after)

	if after.Services.Len() != 1 {
		t.Fatalf("the invalid service must be skipped: %d services", after.Services.Len())
	}
	sp1, _ := before.Services.Get(httpPort)
	sp2, _ := after.Services.Get(httpPort)
	if sp1 != sp2 {
		t.Fatalf("valid service changed")
	}
	// badIP's valid endpoint counts; its invalid one and badPort's port do not.
	want := []string{"10.0.0.1:8080", "10.0.0.2:8080"}
	if got := endpointAddrs(after, httpPort); !slices.Equal(got, want) {
		t.Fatalf("endpoints %v, want %v", got, want)
	}
	if after.Endpoints.Len() != 1 {
		t.Fatalf("the label-less slice must be ignored: %d endpoint entries", after.Endpoints.Len())
	}
}

func TestTrackerSliceLosingItsLabelIsRemoved(t *testing.T) {
	tr := NewTracker(proxy.IPv4)
	s := makeSlice("ns", "web-1", "web", []string{"10.0.0.1"}, nil)
	tr.OnEndpointSliceUpdate(nil, s)
	tr.Commit()
	unlabelled := makeSlice("ns", "web-1", "web", []string{"10.0.0.1"}, func(s *discoveryv1.EndpointSlice) { s.Labels = nil })
	if !tr.OnEndpointSliceUpdate(s, unlabelled) {
		t.Fatalf("a slice leaving its service must need a sync")
	}
	snap, _ := tr.Commit()
	if snap.Endpoints.Len() != 0 {
		t.Fatalf("endpoints of a slice that no longer names a service remain")
	}
	// Deleting the (never valid) object afterwards is harmless.
	if tr.OnEndpointSliceUpdate(unlabelled, nil) {
		t.Fatalf("deleting an ignored slice must not need a sync")
	}
}

// A slice relabelled to another Service leaves the first and counts for the
// second, in one event.
func TestTrackerSliceMovingToAnotherService(t *testing.T) {
	tr := NewTracker(proxy.IPv4)
	s := makeSlice("ns", "web-1", "web", []string{"10.0.0.1"}, nil)
	tr.OnEndpointSliceUpdate(nil, s)
	tr.Commit()
	moved := makeSlice("ns", "web-1", "api", []string{"10.0.0.1"}, nil)
	if !tr.OnEndpointSliceUpdate(s, moved) {
		t.Fatalf("a slice moving to another Service must need a sync")
	}
	snap, ch := tr.Commit()
	api := spn("ns", "api", "http", proxy.TCP)
	if got := endpointAddrs(snap, api); snap.Endpoints.Len() != 1 || !slices.Equal(got, []string{"10.0.0.1:8080"}) {
		t.Fatalf("after the move: %d endpoint lists, api has %v", snap.Endpoints.Len(), got)
	}
	if !maps.Equal(ch.Changed, changedSet(httpPort, api)) {
		t.Fatalf("changes %v, want both Services' ports", ch.Changed)
	}
	if _, ok := tr.services[proxy.ServiceName{Namespace: "ns", Name: "web"}]; ok || tr.sliceOwner[sliceKey{"ns", "web-1"}] != "api" {
		t.Fatalf("the first Service is still held (%v) or the slice's owner is %q", ok, tr.sliceOwner[sliceKey{"ns", "web-1"}])
	}
}

func TestTrackerTriggerTimes(t *testing.T) {
	tr := NewTracker(proxy.IPv4)
	t1 := time.Now().Add(time.Second).UTC().Truncate(time.Second)
	t2 := t1.Add(time.Second)
	stamp := func(ts time.Time) func(*discoveryv1.EndpointSlice) {
		return func(s *discoveryv1.EndpointSlice) {
			s.Annotations = map[string]string{v1.EndpointsLastChangeTriggerTime: ts.Format(time.RFC3339)}
		}
	}
	old := time.Now().Add(-time.Hour)
	tr.OnEndpointSliceUpdate(nil, makeSlice("ns", "a", "web", []string{"10.0.0.1"}, stamp(t2)))
	tr.OnEndpointSliceUpdate(nil, makeSlice("ns", "b", "other", []string{"10.0.0.2"}, stamp(t1)))
	tr.OnEndpointSliceUpdate(nil, makeSlice("ns", "c", "third", []string{"10.0.0.3"}, stamp(old)))
	_, ch := tr.Commit()
	if !slices.EqualFunc(ch.TriggerTimes, []time.Time{t1, t2}, time.Time.Equal) {
		t.Fatalf("trigger times %v, want [%v %v] (older than the tracker dropped)", ch.TriggerTimes, t1, t2)
	}

	// A change that cancels out leaves no trigger time behind.
	a := makeSlice("ns", "a", "web", []string{"10.0.0.1"}, stamp(t2))
	b := makeSlice("ns", "a", "web", []string{"10.0.0.9"}, stamp(t2.Add(time.Second)))
	tr.OnEndpointSliceUpdate(a, b)
	tr.OnEndpointSliceUpdate(b, a)
	_, ch = tr.Commit()
	if len(ch.TriggerTimes) != 0 {
		t.Fatalf("cancelled change kept trigger times %v", ch.TriggerTimes)
	}
}

func TestTrackerPendingAndSynced(t *testing.T) {
	tr := NewTracker(proxy.IPv4)
	if tr.Synced() {
		t.Fatalf("a new tracker is not synced")
	}
	tr.OnServiceUpdate(nil, makeService("ns", "a", nil))
	tr.OnServiceUpdate(nil, makeService("ns", "b", nil))
	tr.OnEndpointSliceUpdate(nil, makeSlice("ns", "a-1", "a", []string{"10.0.0.1"}, nil))
	tr.OnEndpointSliceUpdate(nil, makeSlice("ns", "a-2", "a", []string{"10.0.0.2"}, nil))
	if s, e := tr.Pending(); s != 2 || e != 1 {
		t.Fatalf("Pending() = %d, %d; want 2 services, 1 service with endpoint changes", s, e)
	}
	tr.OnServicesSynced()
	if tr.Synced() {
		t.Fatalf("synced before endpoint slices synced")
	}
	tr.OnEndpointSlicesSynced()
	if !tr.Synced() {
		t.Fatalf("not synced after both")
	}
	tr.Commit()
	if s, e := tr.Pending(); s != 0 || e != 0 {
		t.Fatalf("Pending() after commit = %d, %d", s, e)
	}
}

func TestTrackerConntrackCleanup(t *testing.T) {
	udp := func(s *discoveryv1.EndpointSlice) { s.Ports[0].Protocol = ptrTo(v1.ProtocolUDP) }
	notServing := func(s *discoveryv1.EndpointSlice) {
		s.Endpoints[0].Conditions.Serving = ptrTo(false)
		s.Endpoints[0].Conditions.Ready = ptrTo(false)
	}
	both := func(fs ...func(*discoveryv1.EndpointSlice)) func(*discoveryv1.EndpointSlice) {
		return func(s *discoveryv1.EndpointSlice) {
			for _, f := range fs {
				f(s)
			}
		}
	}
	cases := []struct {
		name     string
		from, to *discoveryv1.EndpointSlice
		want     bool
	}{
		{"UDP first endpoint", nil, makeSlice("ns", "s", "web", []string{"10.0.0.1"}, udp), true},
		{"UDP endpoint added", makeSlice("ns", "s", "web", []string{"10.0.0.1"}, udp),
			makeSlice("ns", "s", "web", []string{"10.0.0.1", "10.0.0.2"}, udp), false},
		{"UDP endpoint removed", makeSlice("ns", "s", "web", []string{"10.0.0.1", "10.0.0.2"}, udp),
			makeSlice("ns", "s", "web", []string{"10.0.0.1"}, udp), true},
		{"UDP endpoint stops serving", makeSlice("ns", "s", "web", []string{"10.0.0.1"}, udp),
			makeSlice("ns", "s", "web", []string{"10.0.0.1"}, both(udp, notServing)), true},
		{"UDP slice deleted", makeSlice("ns", "s", "web", []string{"10.0.0.1"}, udp), nil, true},
		{"TCP endpoint removed", makeSlice("ns", "s", "web", []string{"10.0.0.1", "10.0.0.2"}, nil),
			makeSlice("ns", "s", "web", []string{"10.0.0.1"}, nil), false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tr := NewTracker(proxy.IPv4)
			if tc.from != nil {
				tr.OnEndpointSliceUpdate(nil, tc.from)
				tr.Commit()
			}
			tr.OnEndpointSliceUpdate(tc.from, tc.to)
			if _, ch := tr.Commit(); ch.ConntrackCleanup != tc.want {
				t.Fatalf("ConntrackCleanup = %v, want %v", ch.ConntrackCleanup, tc.want)
			}
		})
	}
}

func TestTrackerConcurrentUse(t *testing.T) {
	tr := NewTracker(proxy.IPv4)
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Go(func() {
			for i := range 50 {
				name := string(rune('a'+w)) + "-" + string(rune('a'+i%26))
				tr.OnServiceUpdate(nil, makeService("ns", name, nil))
				tr.OnEndpointSliceUpdate(nil, makeSlice("ns", name, name, []string{"10.0.0.1"}, nil))
				if i%10 == 0 {
					tr.Commit()
				}
			}
		})
	}
	wg.Wait()
	snap, _ := tr.Commit()
	checkSnapshot(t, snap)
	if snap.Services.Len() != 4*26 || snap.Endpoints.Len() != 4*26 {
		t.Fatalf("got %d services, %d endpoint entries; want 104 each", snap.Services.Len(), snap.Endpoints.Len())
	}
}
