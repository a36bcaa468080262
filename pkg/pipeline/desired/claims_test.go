package desired

import (
	"net/netip"
	"reflect"
	"slices"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/svcproxy/svcproxy/pkg/pipeline/model"
	"github.com/svcproxy/svcproxy/pkg/proxy"
)

// A frontend leads to one place. Whoever claims it with the lower rank
// (cluster IP, then LB IP, then external IP; then the older Service, then
// name order) gets it, on every node alike; the others lose it and are
// told so.
func TestContestedFrontends(t *testing.T) {
	victim := svcPort("victim", addrs("172.30.0.10"), nil)
	thief := svcPort("thief", addrs("172.30.0.11"), func(sp *model.ServicePort) {
		sp.ExternalIPs = addrs("172.30.0.10", "203.0.113.5") // the victim's cluster IP:80
	})
	lbA := svcPort("lb-a", addrs("172.30.0.12"), func(sp *model.ServicePort) {
		sp.LoadBalancerIPs = addrs("198.51.100.1")
	})
	lbB := svcPort("lb-b", addrs("172.30.0.13"), func(sp *model.ServicePort) {
		sp.LoadBalancerIPs = addrs("198.51.100.1")
		sp.ExternalIPs = addrs("203.0.113.5")
	})
	self := svcPort("self", addrs("172.30.0.14"), func(sp *model.ServicePort) {
		sp.ExternalIPs = addrs("172.30.0.14") // its own cluster IP
	})
	other := svcPort("other-port", addrs("172.30.0.15"), func(sp *model.ServicePort) {
		sp.Port = 81
		sp.ExternalIPs = addrs("172.30.0.10") // same address, another port: no contest
	})
	snap := snapshot(proxy.IPv4, snapEntry{sp: victim}, snapEntry{sp: thief}, snapEntry{sp: lbA}, snapEntry{sp: lbB},
		snapEntry{sp: self}, snapEntry{sp: other})
	st := Compute(nil, snap, model.Changes{}, testNode, v4Options())

	for _, tt := range []struct {
		port         proxy.ServicePortName
		external, lb []netip.Addr
	}{
		{victim.Name, nil, nil},
		{thief.Name, nil, nil}, // 203.0.113.5: lb-b's external claim sorts first
		{lbA.Name, nil, addrs("198.51.100.1")},
		{lbB.Name, addrs("203.0.113.5"), nil},
		{self.Name, nil, nil},
		{other.Name, addrs("172.30.0.10"), nil},
	} {
		sp := st.Service(tt.port)
		if !slices.Equal(sp.ExternalIPs, tt.external) || !slices.Equal(sp.LoadBalancerIPs, tt.lb) {
			t.Errorf("%s: external %v lb %v, want %v %v", tt.port, sp.ExternalIPs, sp.LoadBalancerIPs, tt.external, tt.lb)
		}
	}
	wantLost := map[proxy.ServicePortName][]LostFrontend{
		thief.Name: {{netip.MustParseAddr("172.30.0.10"), ClaimExternalIP, victim.Name, NotRefused},
			{netip.MustParseAddr("203.0.113.5"), ClaimExternalIP, lbB.Name, NotRefused}},
		lbB.Name:  {{netip.MustParseAddr("198.51.100.1"), ClaimLoadBalancerIP, lbA.Name, NotRefused}},
		self.Name: {{netip.MustParseAddr("172.30.0.14"), ClaimExternalIP, self.Name, NotRefused}},
	}
	for name, want := range wantLost {
		if got := st.Lost[name]; !slices.Equal(got, want) {
			t.Errorf("Lost[%s] = %v, want %v", name, got, want)
		}
	}
	if len(st.Lost) != len(wantLost) {
		t.Errorf("Lost = %v, want only %v", st.Lost, wantLost)
	}

	// The winner leaves: the loser gets the frontend in the next
	// incremental State, which lists it as changed.
	snap2 := snapshot(proxy.IPv4, snapEntry{sp: victim}, snapEntry{sp: thief}, snapEntry{sp: lbB},
		snapEntry{sp: self}, snapEntry{sp: other})
	inc := Compute(st, snap2, model.Changes{Changed: map[proxy.ServicePortName]struct{}{lbA.Name: {}}}, testNode, v4Options())
	if got := inc.Service(lbB.Name).LoadBalancerIPs; !slices.Equal(got, addrs("198.51.100.1")) {
		t.Errorf("lb-b after lb-a left: LB IPs %v, want 198.51.100.1", got)
	}
	if _, ok := inc.Changed[lbB.Name]; !ok {
		t.Errorf("Changed %v lacks lb-b, whose frontends changed", inc.Changed)
	}
}

// Equal claims (two external IPs on one address, protocol and port) go to
// the Service created first, whatever the names: a tenant cannot take a
// frontend by creating a Service whose name sorts first.
func TestEqualClaimsGoToTheOldest(t *testing.T) {
	created := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	service := func(name, clusterIP string, age time.Duration, externalIPs ...string) *v1.Service {
		return &v1.Service{
			ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, CreationTimestamp: metav1.NewTime(created.Add(-age))},
			Spec: v1.ServiceSpec{ClusterIP: clusterIP, ClusterIPs: []string{clusterIP}, ExternalIPs: append([]string{"198.51.100.7"}, externalIPs...),
				Ports: []v1.ServicePort{{Protocol: v1.ProtocolTCP, Port: 80}}},
		}
	}
	tracker := model.NewTracker(proxy.IPv4)
	tracker.OnServiceUpdate(nil, service("zz-old", "172.30.0.30", time.Hour))
	tracker.OnServiceUpdate(nil, service("aa-new", "172.30.0.31", 0))
	// Of equal age, the name decides (198.51.100.8, claimed by these two only).
	tracker.OnServiceUpdate(nil, service("mm-same-age-b", "172.30.0.32", 0, "198.51.100.8"))
	tracker.OnServiceUpdate(nil, service("mm-same-age-a", "172.30.0.33", 0, "198.51.100.8"))
	snap, changes := tracker.Commit()
	st := Compute(nil, snap, changes, testNode, v4Options())

	port := func(name string) proxy.ServicePortName {
		return proxy.ServicePortName{ServiceName: proxy.ServiceName{Namespace: "ns", Name: name}, Protocol: proxy.TCP}
	}
	old := port("zz-old")
	if got := st.Service(old).ExternalIPs; !slices.Equal(got, addrs("198.51.100.7")) {
		t.Errorf("the oldest Service's external IPs %v, want 198.51.100.7", got)
	}
	lostTo := func(addr string, winner proxy.ServicePortName) LostFrontend {
		return LostFrontend{Addr: netip.MustParseAddr(addr), Kind: ClaimExternalIP, Winner: winner}
	}
	for name, want := range map[string][]LostFrontend{
		"aa-new":        {lostTo("198.51.100.7", old)},
		"mm-same-age-a": {lostTo("198.51.100.7", old)},
		"mm-same-age-b": {lostTo("198.51.100.7", old), lostTo("198.51.100.8", port("mm-same-age-a"))},
	} {
		if got := st.Lost[port(name)]; !slices.Equal(got, want) {
			t.Errorf("Lost[%s] = %v, want %v", name, got, want)
		}
	}
}

// A change that leaves every changed port's claims as they were (new
// endpoints of a LoadBalancer Service, a setting beside its frontends)
// keeps the contest decided before instead of deciding it again over every
// Service; a change of a claim decides it again.
func TestContestKeptWhenClaimsStay(t *testing.T) {
	victim := svcPort("victim", addrs("172.30.0.10"), nil)
	thief := svcPort("thief", addrs("172.30.0.11"), func(sp *model.ServicePort) {
		sp.ExternalIPs = addrs("172.30.0.10")
	})
	lb := svcPort("lb", addrs("172.30.0.12"), func(sp *model.ServicePort) {
		sp.LoadBalancerIPs = addrs("198.51.100.1")
	})
	lbAffinity := *lb
	lbAffinity.AffinitySeconds = 10800 // a new version, the same claims
	thiefMoved := *thief
	thiefMoved.ExternalIPs = addrs("203.0.113.9") // no longer the victim's
	changed := func(names ...proxy.ServicePortName) model.Changes {
		c := model.Changes{Changed: map[proxy.ServicePortName]struct{}{}}
		for _, n := range names {
			c.Changed[n] = struct{}{}
		}
		return c
	}
	prev := Compute(nil, snapshot(proxy.IPv4, snapEntry{sp: victim}, snapEntry{sp: thief}, snapEntry{sp: lb}),
		model.Changes{}, testNode, v4Options())
	for _, tt := range []struct {
		name    string
		snap    *model.Snapshot
		changes model.Changes
		kept    bool
	}{
		{"endpoints of claiming ports", snapshot(proxy.IPv4, snapEntry{sp: victim},
			snapEntry{sp: thief, eps: []model.Endpoint{readyEP("10.0.1.1", "node-a")}},
			snapEntry{sp: lb, eps: []model.Endpoint{readyEP("10.0.1.2", "node-b")}}), changed(thief.Name, lb.Name), true},
		{"a setting beside the claims", snapshot(proxy.IPv4, snapEntry{sp: victim}, snapEntry{sp: thief},
			snapEntry{sp: &lbAffinity}), changed(lb.Name), true},
		{"a claim moves", snapshot(proxy.IPv4, snapEntry{sp: victim}, snapEntry{sp: &thiefMoved},
			snapEntry{sp: lb}), changed(thief.Name), false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			inc := Compute(prev, tt.snap, tt.changes, testNode, v4Options())
			full := Compute(nil, tt.snap, model.Changes{}, testNode, v4Options())
			assertSameState(t, tt.name, inc, full)
			if !reflect.DeepEqual(inc.Lost, full.Lost) {
				t.Errorf("Lost = %v, want %v", inc.Lost, full.Lost)
			}
			// The same map is prev's contest, not one decided again.
			kept := reflect.ValueOf(inc.claims).UnsafePointer() == reflect.ValueOf(prev.claims).UnsafePointer()
			if kept != tt.kept {
				t.Errorf("contest kept from prev: %v, want %v", kept, tt.kept)
			}
		})
	}
}
