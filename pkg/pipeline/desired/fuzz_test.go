package desired

import (
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/svcproxy/svcproxy/pkg/pipeline/model"
	"github.com/svcproxy/svcproxy/pkg/proxy"
)

// FuzzCompute builds arbitrary Services and EndpointSlices from the fuzz
// bytes, runs them through a Tracker and Compute for both families, then
// applies a second batch of edits and checks that the incremental Compute
// equals a full one. The seed corpus is in testdata/fuzz/FuzzCompute.
func FuzzCompute(f *testing.F) {
	f.Add([]byte{3, 1, 2, 0, 1, 1, 4, 2, 1, 1, 1, 5, 9, 2, 1, 0, 3})
	f.Fuzz(func(t *testing.T, data []byte) {
		g := &fuzzGen{data: data}
		first, second := g.objects(), g.objects()
		for _, family := range proxy.Families {
			tracker := model.NewTracker(family)
			apply(tracker, nil, first)
			snap, changes := tracker.Commit()
			state := Compute(nil, snap, changes, fuzzNode, v4OptionsFor(family))
			checkInvariants(t, state)
			checkLosses(t, state, snap)

			apply(tracker, &first, second)
			snap, changes = tracker.Commit()
			inc := Compute(state, snap, changes, fuzzNode, v4OptionsFor(family))
			full := Compute(nil, snap, changes, fuzzNode, v4OptionsFor(family))
			checkInvariants(t, inc)
			checkLosses(t, inc, snap)
			if inc.Services.Len() != full.Services.Len() {
				t.Fatalf("%s: incremental has %d ports, full %d", family, inc.Services.Len(), full.Services.Len())
			}
			for name, sp := range full.Services.All() {
				if !sp.Equal(inc.Service(name)) {
					t.Fatalf("%s: %s: incremental %+v, full %+v", family, name, inc.Service(name), sp)
				}
			}
		}
	})
}

// v4OptionsFor are the unit tests' options for family, on a node that
// tunnels (DSR) and forwards every Service by dsr unless it says otherwise.
func v4OptionsFor(family proxy.IPFamily) Options {
	o := v4Options()
	o.Family, o.DSR, o.ExternalForwarding = family, true, proxy.ForwardDSR
	return o
}

// fuzzNode is testNode with node-b, which the fuzz's endpoints name, as a
// peer.
var fuzzNode = func() Node {
	n := testNode
	n.Peers = []Peer{{Name: "node-b", IPs: addrs("192.168.0.3", "fd00:1::3")}}
	return n
}()

type fuzzObjects struct {
	services []*v1.Service
	slices   []*discoveryv1.EndpointSlice
}

// apply turns the difference between two batches into tracker events:
// objects are keyed by position, so the second batch updates, adds or
// deletes what the first created.
func apply(tr *model.Tracker, prev *fuzzObjects, next fuzzObjects) {
	if prev == nil {
		prev = &fuzzObjects{}
	}
	for i := range max(len(prev.services), len(next.services)) {
		tr.OnServiceUpdate(at(prev.services, i), at(next.services, i))
	}
	for i := range max(len(prev.slices), len(next.slices)) {
		tr.OnEndpointSliceUpdate(at(prev.slices, i), at(next.slices, i))
	}
}

func at[T any](list []*T, i int) *T {
	if i < len(list) {
		return list[i]
	}
	return nil
}

func checkInvariants(t *testing.T, st *State) {
	t.Helper()
	for name, sp := range st.Services.All() {
		if sp == nil || sp.Name != name || !st.Family.Contains(sp.ClusterIP) {
			t.Fatalf("%s: bad port %s: %+v", st.Family, name, sp)
		}
		for _, a := range append(slices.Clone(sp.ExternalIPs), sp.LoadBalancerIPs...) {
			if !st.Family.Contains(a) {
				t.Fatalf("%s: %s has frontend %s of the other family", st.Family, name, a)
			}
			if slices.Contains(st.NodeIPs, a) {
				t.Fatalf("%s: %s has frontend %s, a node address", st.Family, name, a)
			}
		}
		if sp.AllowedSources != nil && len(sp.LoadBalancerIPs) == 0 {
			t.Fatalf("%s: %s has source ranges without LB IPs", st.Family, name)
		}
		for what, d := range map[string]Dispatch{"internal": sp.Internal, "external": sp.External, "cluster": sp.Cluster} {
			checkDispatch(t, fmt.Sprintf("%s %s %s", st.Family, name, what), st.Family, d, len(sp.Cluster.Endpoints) > 0)
		}
		checkDSR(t, st, sp)
	}
}

// checkDSR: a port has a DSR exactly where it applies; its tunnels are
// External's endpoints, one per address, sorted, each to a peer address of
// the family; In is a dispatch over endpoints of the Cluster set's family
// that drops when empty.
func checkDSR(t *testing.T, st *State, sp *ServicePort) {
	t.Helper()
	ctx := fmt.Sprintf("%s %s", st.Family, sp.Name)
	if (sp.DSR != nil) != (DSRApplies(sp, true) == "") {
		t.Fatalf("%s: DSR %+v, but DSRApplies says %q", ctx, sp.DSR, DSRApplies(sp, true))
	}
	if sp.DSR == nil {
		return
	}
	if !slices.IsSortedFunc(sp.DSR.Tunnels, func(a, b Tunnel) int { return a.Endpoint.Compare(b.Endpoint) }) ||
		len(slices.CompactFunc(slices.Clone(sp.DSR.Tunnels), func(a, b Tunnel) bool { return a.Endpoint == b.Endpoint })) != len(sp.DSR.Tunnels) {
		t.Fatalf("%s: tunnels not sorted and unique by endpoint: %v", ctx, sp.DSR.Tunnels)
	}
	for _, tn := range sp.DSR.Tunnels {
		if !slices.ContainsFunc(sp.External.Endpoints, func(e Endpoint) bool { return e.IP == tn.Endpoint }) || !slices.Contains(st.Peers, tn.Node) {
			t.Fatalf("%s: tunnel %+v is not to an External endpoint on a peer (%v)", ctx, tn, st.Peers)
		}
	}
	checkDispatch(t, ctx+" dsr in", st.Family, sp.DSR.In, true)
}

// checkLosses: a refused frontend is a node address; a lost one went to a
// claim that beats it (a lower kind, or the same kind of an older Service,
// or of one as old whose name sorts first).
func checkLosses(t *testing.T, st *State, snap *model.Snapshot) {
	t.Helper()
	for name, lost := range st.Lost {
		loser, _ := snap.Services.Get(name)
		for _, l := range lost {
			if l.Refused == RefusedNodeAddress {
				if !slices.Contains(st.NodeIPs, l.Addr) {
					t.Fatalf("%s: %s refused %s, not a node address", st.Family, name, l.Addr)
				}
				continue
			}
			winner, ok := snap.Services.Get(l.Winner)
			if !ok || loser == nil {
				t.Fatalf("%s: %s lost %s to %s, which is not in the snapshot", st.Family, name, l.Addr, l.Winner)
			}
			won := claim{l.Winner, winningKind(winner, l.Addr, st.Family), winner.Created}
			if !won.beats(claim{name, l.Kind, loser.Created}) {
				t.Fatalf("%s: %s lost %s %s to %+v, which does not beat it", st.Family, name, l.Kind, l.Addr, won)
			}
		}
	}
}

// winningKind is the strongest kind sp claims addr with.
func winningKind(sp *model.ServicePort, addr netip.Addr, family proxy.IPFamily) FrontendKind {
	if ip, ok := firstOfFamily(sp.ClusterIPs, family); ok && ip == addr {
		return ClaimClusterIP
	}
	if slices.ContainsFunc(sp.LoadBalancerIPs, func(a netip.Addr) bool { return a.Unmap() == addr }) {
		return ClaimLoadBalancerIP
	}
	return ClaimExternalIP
}

func checkDispatch(t *testing.T, ctx string, family proxy.IPFamily, d Dispatch, anyUsable bool) {
	t.Helper()
	if !slices.IsSortedFunc(d.Endpoints, Endpoint.Compare) || len(slices.Compact(slices.Clone(d.Endpoints))) != len(d.Endpoints) {
		t.Fatalf("%s: endpoints not sorted and unique: %v", ctx, d.Endpoints)
	}
	for _, e := range d.Endpoints {
		if !family.Contains(e.IP) {
			t.Fatalf("%s: endpoint %s of the other family", ctx, e.IP)
		}
	}
	if len(d.Endpoints) > 0 && d.Empty != Reject {
		t.Fatalf("%s: Empty verdict %s set beside endpoints", ctx, d.Empty)
	}
	if len(d.Endpoints) == 0 && (d.Empty == Drop) != anyUsable {
		t.Fatalf("%s: Empty %s but usable endpoints elsewhere = %v", ctx, d.Empty, anyUsable)
	}
}

// fuzzGen draws choices from the fuzz bytes; past the end it draws zeros.
type fuzzGen struct {
	data []byte
	pos  int
}

func (g *fuzzGen) n(limit int) int {
	if g.pos >= len(g.data) {
		return 0
	}
	g.pos++
	return int(g.data[g.pos-1]) % limit
}

func (g *fuzzGen) pick(options ...string) string { return options[g.n(len(options))] }

// fuzzIPs holds testNode's addresses (192.168.0.2, fd00:1::2) too: as
// external and LB IPs they must be refused.
var fuzzIPs = []string{"172.30.0.1", "172.30.0.2", "fd00:172:30::1", "::ffff:172.30.0.3", "bogus", "", "None",
	"10.0.1.1", "10.0.2.1", "fd00:10::1:1", "198.51.100.1", "2001:db8::1", "192.168.0.2", "fd00:1::2"}

func (g *fuzzGen) ip() string { return fuzzIPs[g.n(len(fuzzIPs))] }

func (g *fuzzGen) objects() fuzzObjects {
	var out fuzzObjects
	for i := range g.n(4) {
		out.services = append(out.services, g.service(i))
	}
	for i := range g.n(5) {
		out.slices = append(out.slices, g.slice(i))
	}
	return out
}

func (g *fuzzGen) service(i int) *v1.Service {
	svc := &v1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "svc-" + strconv.Itoa(i)}}
	svc.Spec.Type = v1.ServiceType(g.pick("ClusterIP", "NodePort", "LoadBalancer", "ExternalName"))
	svc.Spec.ClusterIPs = []string{g.ip(), g.ip()}[:1+g.n(2)]
	svc.Spec.ClusterIP = svc.Spec.ClusterIPs[0]
	for range g.n(3) {
		svc.Spec.Ports = append(svc.Spec.Ports, v1.ServicePort{
			Name: g.pick("", "a", "b"), Protocol: v1.Protocol(g.pick("TCP", "UDP", "SCTP", "", "ICMP")),
			Port: int32(g.n(3) * 80), NodePort: int32(g.n(2) * (30000 + g.n(3))),
		})
	}
	for range g.n(3) {
		svc.Spec.ExternalIPs = append(svc.Spec.ExternalIPs, g.ip())
	}
	for range g.n(3) {
		ing := v1.LoadBalancerIngress{IP: g.ip()}
		if g.n(3) == 0 {
			mode := v1.LoadBalancerIPModeProxy
			ing.IPMode = &mode
		}
		svc.Status.LoadBalancer.Ingress = append(svc.Status.LoadBalancer.Ingress, ing)
	}
	for range g.n(3) {
		svc.Spec.LoadBalancerSourceRanges = append(svc.Spec.LoadBalancerSourceRanges,
			g.pick(" 203.0.113.0/24", "192.168.0.0/16", "2001:db8::/64", "garbage", "10.0.0.1/40"))
	}
	svc.Spec.ExternalTrafficPolicy = v1.ServiceExternalTrafficPolicy(g.pick("", "Cluster", "Local"))
	itp := v1.ServiceInternalTrafficPolicy(g.pick("Cluster", "Local"))
	svc.Spec.InternalTrafficPolicy = &itp
	svc.Spec.HealthCheckNodePort = int32(g.n(2) * 32000)
	svc.Spec.SessionAffinity = v1.ServiceAffinity(g.pick("None", "ClientIP"))
	// Few distinct ages, so that equal claims tie on age as often as not.
	svc.CreationTimestamp = metav1.NewTime(time.Unix(int64(1_700_000_000+g.n(3)), 0))
	return svc
}

func (g *fuzzGen) slice(i int) *discoveryv1.EndpointSlice {
	s := &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "slice-" + strconv.Itoa(i),
		Labels: map[string]string{}}}
	if g.n(5) != 0 {
		s.Labels[discoveryv1.LabelServiceName] = "svc-" + strconv.Itoa(g.n(4))
	}
	s.AddressType = discoveryv1.AddressType(g.pick("IPv4", "IPv6", "FQDN"))
	for range g.n(3) {
		name, port, proto := g.pick("", "a", "b"), int32(g.n(3)*8080), v1.Protocol(g.pick("TCP", "UDP", "SCTP"))
		s.Ports = append(s.Ports, discoveryv1.EndpointPort{Name: &name, Port: &port, Protocol: &proto})
	}
	for range g.n(5) {
		s.Endpoints = append(s.Endpoints, g.endpoint())
	}
	return s
}

func (g *fuzzGen) endpoint() discoveryv1.Endpoint {
	cond := func() *bool {
		switch g.n(3) {
		case 1:
			return new(true)
		case 2:
			return new(false)
		}
		return nil
	}
	e := discoveryv1.Endpoint{Addresses: []string{g.ip()},
		Conditions: discoveryv1.EndpointConditions{Ready: cond(), Serving: cond(), Terminating: cond()}}
	if node := g.pick("", "node-a", "node-b"); node != "" {
		e.NodeName = &node
	}
	if g.n(2) == 1 {
		e.Hints = &discoveryv1.EndpointHints{ForZones: []discoveryv1.ForZone{{Name: g.pick("zone-a", "zone-b")}}}
		if g.n(2) == 1 {
			e.Hints.ForNodes = []discoveryv1.ForNode{{Name: g.pick("node-a", "node-b")}}
		}
	}
	return e
}
