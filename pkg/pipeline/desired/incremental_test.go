package desired

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"net/netip"
	"testing"

	"github.com/svcproxy/svcproxy/pkg/pipeline/model"
	"github.com/svcproxy/svcproxy/pkg/proxy"
)

// randomWorld is a mutable set of service ports and endpoints from which
// snapshots are cut, for the incremental-versus-full property test.
type randomWorld struct {
	rng  *rand.Rand
	svcs map[proxy.ServicePortName]*model.ServicePort
	eps  map[proxy.ServicePortName][]model.Endpoint
}

func (w *randomWorld) snapshot() *model.Snapshot {
	return &model.Snapshot{Family: proxy.IPv4, Services: model.NewPortMap(w.svcs), Endpoints: endpointMap(w.eps)}
}

// mutate changes, adds or removes one random service port and returns its name.
func (w *randomWorld) mutate() proxy.ServicePortName {
	// Two ports per service, so that health checks count over several.
	name := portName(fmt.Sprintf("svc-%d", w.rng.IntN(20)), []proxy.Protocol{proxy.TCP, proxy.UDP}[w.rng.IntN(2)])
	switch w.rng.IntN(6) {
	case 0:
		delete(w.svcs, name)
	case 1:
		delete(w.eps, name)
	case 2, 3:
		w.svcs[name] = w.randomPort(name)
	default:
		w.eps[name] = w.randomEndpoints()
	}
	return name
}

func (w *randomWorld) randomPort(name proxy.ServicePortName) *model.ServicePort {
	r := w.rng
	sp := &model.ServicePort{Name: name, Port: 80, AffinitySeconds: int32(r.IntN(2) * 10800)}
	sp.ClusterIPs = []netip.Addr{netip.AddrFrom4([4]byte{172, 30, 0, byte(r.IntN(200))})}
	if r.IntN(5) == 0 { // a v6-only port must not appear in the v4 state
		sp.ClusterIPs = addrs("fd00:172:30::1")
	}
	if r.IntN(2) == 0 {
		sp.NodePort = uint16(30000 + r.IntN(2000))
		sp.ExternalLocal = r.IntN(2) == 0
	}
	if r.IntN(3) == 0 {
		sp.LoadBalancerIPs = addrs("198.51.100.1")
		sp.SourceRanges = prefixes([]string{"203.0.113.0/24", "192.168.0.0/16"}[r.IntN(2)])
		if sp.ExternalLocal {
			sp.HealthCheckNodePort = uint16(31000 + r.IntN(100))
		}
	}
	sp.InternalLocal = r.IntN(3) == 0
	if r.IntN(4) == 0 { // contested: another port's cluster IP, or a shared one
		sp.ExternalIPs = []netip.Addr{netip.AddrFrom4([4]byte{172, 30, 0, byte(r.IntN(200))}), netip.MustParseAddr("198.51.100.1")}
	}
	return sp
}

func (w *randomWorld) randomEndpoints() []model.Endpoint {
	var out []model.Endpoint
	for i := range w.rng.IntN(5) {
		node := []string{"node-a", "node-b"}[w.rng.IntN(2)]
		e := ep(fmt.Sprintf("10.0.%d.%d", 1+w.rng.IntN(2), i+1), node, w.rng.IntN(3) > 0, w.rng.IntN(2) == 0, w.rng.IntN(2) == 0)
		if w.rng.IntN(3) == 0 {
			e = withHints(e, [][]string{zoneA, zoneB}[w.rng.IntN(2)], nil)
		}
		out = append(out, e)
	}
	return out
}

func TestIncrementalEqualsFull(t *testing.T) {
	for seed := range uint64(20) {
		w := &randomWorld{rng: rand.New(rand.NewPCG(seed, 1)), svcs: map[proxy.ServicePortName]*model.ServicePort{},
			eps: map[proxy.ServicePortName][]model.Endpoint{}}
		prev := Compute(nil, w.snapshot(), model.Changes{}, testNode, v4Options())
		for step := range 50 {
			changed := map[proxy.ServicePortName]struct{}{}
			for range 1 + w.rng.IntN(3) {
				changed[w.mutate()] = struct{}{}
			}
			prev = stepIncremental(t, fmt.Sprintf("seed %d step %d", seed, step), prev, w.snapshot(), changed, testNode, v4Options())
		}
	}
}

// stepIncremental computes snap after changed from prev, incrementally
// and in full, checks both agree and that Changed is exact, and returns
// the incremental State.
func stepIncremental(t *testing.T, ctx string, prev *State, snap *model.Snapshot, changed map[proxy.ServicePortName]struct{},
	node Node, opts Options,
) *State {
	t.Helper()
	prevServices := maps.Collect(prev.Services.All())
	inc := Compute(prev, snap, model.Changes{Changed: changed}, node, opts)
	assertSameState(t, ctx, inc, Compute(nil, snap, model.Changes{}, node, opts))
	assertChangedSet(t, ctx, prevServices, prev, inc)
	return inc
}

func assertSameState(t *testing.T, ctx string, inc, full *State) {
	t.Helper()
	if inc.Services.Len() != full.Services.Len() {
		t.Fatalf("%s: incremental has %d ports, full %d", ctx, inc.Services.Len(), full.Services.Len())
	}
	for name, sp := range full.Services.All() {
		if !sp.Equal(inc.Service(name)) {
			t.Fatalf("%s: %s differs:\nincremental %+v\nfull        %+v", ctx, name, inc.Service(name), sp)
		}
	}
	if fmt.Sprint(inc.HealthChecks) != fmt.Sprint(full.HealthChecks) {
		t.Fatalf("%s: health checks %v, full %v", ctx, inc.HealthChecks, full.HealthChecks)
	}
}

// assertChangedSet checks that Changed lists exactly the ports that differ,
// that unchanged ports keep prev's pointer, and that prev was not modified.
func assertChangedSet(t *testing.T, ctx string, prevServices map[proxy.ServicePortName]*ServicePort, prev, inc *State) {
	t.Helper()
	// inc shares prev's storage (model.PortMap): prev must still show
	// exactly what it showed before the incremental Compute.
	if !maps.Equal(prevServices, maps.Collect(prev.Services.All())) || prev.Services.Len() != len(prevServices) {
		t.Fatalf("%s: Compute modified prev.Services", ctx)
	}
	names := maps.Collect(prev.Services.All())
	maps.Copy(names, maps.Collect(inc.Services.All()))
	for name := range names {
		old, now := prev.Service(name), inc.Service(name)
		_, listed := inc.Changed[name]
		if differs := !old.Equal(now); differs != listed {
			t.Fatalf("%s: %s differs=%v but listed in Changed=%v", ctx, name, differs, listed)
		}
		if !listed && old != now {
			t.Fatalf("%s: unchanged %s not shared by pointer", ctx, name)
		}
	}
	if inc.Changed == nil {
		t.Fatalf("%s: incremental State.Changed is nil", ctx)
	}
}

// A local endpoint that goes from ready to serving-and-terminating leaves the
// port's rules as they were (traffic falls back to the terminating endpoint)
// but must drop the healthCheckNodePort's count to 0, so load balancers
// drain the node (upstream e2e: "should fail health check node port if there
// are only terminating endpoints").
func TestIncrementalHealthCheckOnlyTerminating(t *testing.T) {
	name := portName("lb", proxy.TCP)
	sp := svcPort("lb", addrs("172.30.0.1"), func(sp *model.ServicePort) {
		sp.NodePort, sp.HealthCheckNodePort, sp.ExternalLocal = 30080, 31000, true
	})
	snap := func(e model.Endpoint) *model.Snapshot {
		return &model.Snapshot{Family: proxy.IPv4,
			Services:  model.NewPortMap(map[proxy.ServicePortName]*model.ServicePort{name: sp}),
			Endpoints: endpointMap(map[proxy.ServicePortName][]model.Endpoint{name: {e}})}
	}
	prev := Compute(nil, snap(readyEP("10.0.1.5", "node-a")), model.Changes{}, testNode, v4Options())
	if len(prev.HealthChecks) != 1 || prev.HealthChecks[0].LocalReady != 1 {
		t.Fatalf("ready endpoint: HealthChecks = %+v, want one with LocalReady 1", prev.HealthChecks)
	}
	changes := model.Changes{Changed: map[proxy.ServicePortName]struct{}{name: {}}}
	got := Compute(prev, snap(termEP("10.0.1.5", "node-a")), changes, testNode, v4Options())
	if len(got.HealthChecks) != 1 || got.HealthChecks[0].LocalReady != 0 {
		t.Fatalf("only a terminating endpoint: HealthChecks = %+v, want one with LocalReady 0", got.HealthChecks)
	}
}

// TestIncrementalSharesPrevSafely: the new State shares prev's storage
// (model.PortMap shards), so removing, changing and adding ports must leave
// every view of prev (Get, All, Len) as it was: backends and hooks may
// still be reading it.
func TestIncrementalSharesPrevSafely(t *testing.T) {
	svcs, eps := benchWorld(300, 3)
	prev := Compute(nil, &model.Snapshot{Family: proxy.IPv4, Services: model.NewPortMap(svcs), Endpoints: endpointMap(eps)},
		model.Changes{}, testNode, v4Options())
	before := maps.Collect(prev.Services.All())
	gone, moved := portName("svc-00007", proxy.TCP), portName("svc-00011", proxy.TCP)
	added := portName("svc-new", proxy.TCP)
	delete(svcs, gone)
	eps[moved] = eps[moved][1:]
	svcs[added] = &model.ServicePort{Name: added, Port: 80, ClusterIPs: []netip.Addr{netip.MustParseAddr("172.31.9.9")}}
	changes := model.Changes{Changed: map[proxy.ServicePortName]struct{}{gone: {}, moved: {}, added: {}}}
	next := Compute(prev, &model.Snapshot{Family: proxy.IPv4, Services: model.NewPortMap(svcs), Endpoints: endpointMap(eps)},
		changes, testNode, v4Options())

	if len(next.Changed) != 3 || next.Service(gone) != nil || next.Service(added) == nil || next.Service(moved) == before[moved] {
		t.Fatalf("next State: Changed %v, gone %v, added %v", next.Changed, next.Service(gone), next.Service(added))
	}
	if !maps.Equal(maps.Collect(prev.Services.All()), before) || prev.Services.Len() != len(before) {
		t.Fatal("the incremental Compute changed what prev.Services shows")
	}
	if prev.Service(gone) == nil || prev.Service(added) != nil || prev.Service(moved) != before[moved] {
		t.Fatal("prev.Service no longer answers as before")
	}
}

// TestIncrementalHealthChecksFromStateWithoutPorts: a prev State that
// carries health checks but not their ports (one decoded from a dump, not
// made by Compute) is recounted in full, not indexed past its end.
func TestIncrementalHealthChecksFromStateWithoutPorts(t *testing.T) {
	name := portName("lb", proxy.TCP)
	sp := svcPort("lb", addrs("172.30.0.1"), func(sp *model.ServicePort) {
		sp.NodePort, sp.HealthCheckNodePort, sp.ExternalLocal = 30080, 31000, true
	})
	snap := &model.Snapshot{Family: proxy.IPv4,
		Services:  model.NewPortMap(map[proxy.ServicePortName]*model.ServicePort{name: sp}),
		Endpoints: endpointMap(map[proxy.ServicePortName][]model.Endpoint{name: {readyEP("10.0.1.5", "node-a")}})}
	prev := Compute(nil, snap, model.Changes{}, testNode, v4Options())
	decoded := *prev
	decoded.healthPorts = nil
	changes := model.Changes{Changed: map[proxy.ServicePortName]struct{}{name: {}}}
	got := Compute(&decoded, snap, changes, testNode, v4Options())
	if len(got.HealthChecks) != 1 || got.HealthChecks[0].LocalReady != 1 || len(got.healthPorts) != 1 {
		t.Fatalf("HealthChecks = %+v (%d with ports), want one with LocalReady 1", got.HealthChecks, len(got.healthPorts))
	}
}
