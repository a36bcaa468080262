package conntrack

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/svcproxy/svcproxy/internal/metrics"
	"github.com/svcproxy/svcproxy/pkg/kconntrack"
	"github.com/svcproxy/svcproxy/pkg/pipeline/desired"
	"github.com/svcproxy/svcproxy/pkg/pipeline/model"
	"github.com/svcproxy/svcproxy/pkg/proxy"
)

var cleanup = model.Changes{ConntrackCleanup: true}

// world is the State the decision table runs against.
func world() *desired.State {
	return state(
		port("dns", proxy.UDP, "172.30.0.10", 53, servedBy("198.19.1.2:53", "198.19.1.6:53"), nodePort(30053),
			func(sp *desired.ServicePort) {
				sp.ExternalIPs = []netip.Addr{ip("198.18.100.10")}
				sp.LoadBalancerIPs = []netip.Addr{ip("198.18.200.10")}
				// eTP=Local: external traffic only to the local endpoint;
				// flows to the other one still stay (the union serves).
				sp.External.Endpoints = eps("198.19.1.2:53")
			}),
		port("sctp", proxy.SCTP, "172.30.0.11", 80, servedBy("198.19.1.2:8080")),
		port("web", proxy.TCP, "172.30.0.12", 80, servedBy("198.19.1.2:8080"), nodePort(30080)),
		port("empty", proxy.UDP, "172.30.0.13", 53, nodePort(30054)),
		port("web-empty", proxy.TCP, "172.30.0.14", 80, nodePort(30081)),
	)
}

func TestDecisions(t *testing.T) {
	const gone = "198.19.1.10:53" // an endpoint that no longer exists
	cases := []struct {
		name  string
		flow  kconntrack.Flow
		stale bool
	}{
		{"cluster IP to serving endpoint", udp("172.30.0.10:53", "198.19.1.2:53"), false},
		{"cluster IP to removed endpoint", udp("172.30.0.10:53", gone), true},
		{"cluster IP to old target port", udp("172.30.0.10:53", "198.19.1.2:5353"), true},
		{"external IP to endpoint only the cluster dispatch has", udp("198.18.100.10:53", "198.19.1.6:53"), false},
		{"external IP to removed endpoint", udp("198.18.100.10:53", gone), true},
		{"LB IP to removed endpoint", udp("198.18.200.10:53", gone), true},
		{"node port to serving endpoint", udp("198.18.0.11:30053", "198.19.1.2:53"), false},
		{"node port to removed endpoint", udp("198.18.0.11:30053", gone), true},
		{"node port number on an address without node ports", udp("198.18.0.99:30053", gone), false},
		{"unknown port of a cluster IP", udp("172.30.0.10:54", gone), false},
		{"blackhole to service without endpoints", udp("172.30.0.13:53", "172.30.0.13:53"), true},
		{"blackhole to node port without endpoints", udp("198.18.0.11:30054", "198.18.0.11:30054"), true},
		{"flow made before the rules existed", udp("172.30.0.10:53", "172.30.0.10:53"), true},
		{"TCP to removed endpoint", flowOf(kconntrack.ProtoTCP, "172.30.0.12:80", gone), false},
		{"TCP node port to removed endpoint", flowOf(kconntrack.ProtoTCP, "198.18.0.11:30080", gone), false},
		{"TCP to a UDP frontend", flowOf(kconntrack.ProtoTCP, "172.30.0.10:53", gone), false},
		{"TCP attempt made before the rules existed", flowOf(kconntrack.ProtoTCP, "172.30.0.12:80", "172.30.0.12:80"), true},
		{"TCP attempt to a served cluster IP that something answered",
			replied(flowOf(kconntrack.ProtoTCP, "172.30.0.12:80", "172.30.0.12:80")), false},
		{"TCP attempt to a service without endpoints", flowOf(kconntrack.ProtoTCP, "172.30.0.14:80", "172.30.0.14:80"), false},
		{"TCP attempt to a node port before the rules", flowOf(kconntrack.ProtoTCP, "198.18.0.11:30080", "198.18.0.11:30080"), false},
		{"TCP attempt to an unknown port of a served cluster IP", flowOf(kconntrack.ProtoTCP, "172.30.0.12:81", "172.30.0.12:81"), false},
		{"SCTP to serving endpoint", flowOf(kconntrack.ProtoSCTP, "172.30.0.11:80", "198.19.1.2:8080"), false},
		{"SCTP to removed endpoint", flowOf(kconntrack.ProtoSCTP, "172.30.0.11:80", gone), true},
		{"UDP to an SCTP frontend", udp("172.30.0.11:80", gone), false},
		{"pod to pod", udp("198.19.1.6:53", "198.19.1.6:53"), false},
	}
	ct := &kconntrack.Fake{}
	var want []kconntrack.Flow
	for i, tc := range cases {
		// Distinct client ports keep the flows distinct entries.
		tc.flow.Orig.Src = netip.AddrPortFrom(tc.flow.Orig.Src.Addr(), uint16(40000+i))
		ct.Add(tc.flow)
		if tc.stale {
			want = append(want, tc.flow)
		}
	}
	r := New(proxy.IPv4, ct, Options{})
	r.Observe(world(), model.Changes{})
	res, err := r.Reconcile(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for i, tc := range cases {
		deleted := slices.ContainsFunc(ct.Deleted, func(f kconntrack.Flow) bool { return f.Orig.Src.Port() == uint16(40000+i) })
		if deleted != tc.stale {
			t.Errorf("%s: deleted=%v, want %v", tc.name, deleted, tc.stale)
		}
	}
	if res.Listed != len(cases) || res.Stale != len(want) || res.Deleted != len(want) || !res.Complete {
		t.Errorf("result %+v, want listed %d, stale and deleted %d, complete", res, len(cases), len(want))
	}
}

func TestNodePortsOnAllAddressesSkipLoopback(t *testing.T) {
	st := state(port("dns", proxy.UDP, "172.30.0.10", 53, servedBy("198.19.1.2:53"), nodePort(30053)))
	st.NodePorts = desired.NodePortAddrs{All: true}
	ix := buildIndex(st, nil)
	if !ix.stale(udp("10.1.2.3:30053", "198.19.1.10:53")) {
		t.Error("node port flow on some node address to a removed endpoint kept")
	}
	if ix.stale(udp("127.0.0.1:30053", "127.0.0.1:30053")) {
		t.Error("loopback flow on a node port number deleted; node ports do not answer there")
	}
}

// A restart with unchanged state: a fresh Reconciler's first round checks
// everything, and deletes nothing when every flow is valid.
func TestRestartWithUnchangedStateDeletesNothing(t *testing.T) {
	ct := &kconntrack.Fake{}
	ct.Add(udp("172.30.0.10:53", "198.19.1.2:53"), udp("198.18.0.11:30053", "198.19.1.6:53"),
		flowOf(kconntrack.ProtoSCTP, "172.30.0.11:80", "198.19.1.2:8080"))
	r := New(proxy.IPv4, ct, Options{})
	r.Observe(world(), model.Changes{}) // a first sync reports no cleanup
	res, err := r.Reconcile(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if !res.Ran || res.Listed != 3 || res.Deleted != 0 || ct.Deletes != 0 {
		t.Fatalf("first round %+v, %d delete calls; want a full check that deletes nothing", res, ct.Deletes)
	}
}

func TestCoalescesAndRunsOnlyWhenDue(t *testing.T) {
	ct := &kconntrack.Fake{}
	r := New(proxy.IPv4, ct, Options{})
	if res, _ := r.Reconcile(context.Background()); res.Ran {
		t.Fatal("round before any State")
	}
	st := world()
	r.Observe(st, model.Changes{})
	r.Reconcile(context.Background())
	r.Observe(st, model.Changes{})
	if res, _ := r.Reconcile(context.Background()); res.Ran {
		t.Fatal("round without a cleanup trigger")
	}
	for range 5 {
		r.Observe(st, cleanup)
	}
	r.Observe(st, model.Changes{}) // a later sync without cleanup keeps it due
	if res, _ := r.Reconcile(context.Background()); !res.Ran {
		t.Fatal("no round after cleanup triggers")
	}
	if res, _ := r.Reconcile(context.Background()); res.Ran {
		t.Fatal("five triggers were not coalesced into one round")
	}
	if ct.Lists != 2 {
		t.Fatalf("%d listings, want 2", ct.Lists)
	}
}

// Scale to zero and back: the blackhole entry made while the service
// rejected goes once it has an endpoint again; so does the flow to the
// endpoint that went away.
func TestScaleToZeroAndBack(t *testing.T) {
	ct := &kconntrack.Fake{}
	r := New(proxy.IPv4, ct, Options{})
	up := state(port("dns", proxy.UDP, "172.30.0.10", 53, servedBy("198.19.1.2:53")))
	r.Observe(up, model.Changes{})
	r.Reconcile(context.Background())
	ct.Add(udp("172.30.0.10:53", "198.19.1.2:53"))

	zero := next(up, nil, port("dns", proxy.UDP, "172.30.0.10", 53))
	r.Observe(zero, cleanup)
	r.Reconcile(context.Background())
	if len(ct.Flows()) != 0 {
		t.Fatalf("flow to the removed endpoint survived scale to zero: %v", ct.Flows())
	}
	blackhole := udp("172.30.0.10:53", "172.30.0.10:53")
	ct.Add(blackhole)
	back := next(zero, nil, port("dns", proxy.UDP, "172.30.0.10", 53, servedBy("198.19.1.6:53")))
	r.Observe(back, cleanup)
	r.Reconcile(context.Background())
	if len(ct.Flows()) != 0 {
		t.Fatalf("blackhole entry survived scale back: %v", ct.Flows())
	}
}

// A deleted service, or one whose cluster IP moved, leaves flows to its
// old frontends; they go, whether the next sync is incremental or full.
func TestRetiredFrontends(t *testing.T) {
	for _, full := range []bool{false, true} {
		ct := &kconntrack.Fake{}
		r := New(proxy.IPv4, ct, Options{})
		before := state(port("old", proxy.UDP, "172.30.0.20", 53, servedBy("198.19.1.2:53"), nodePort(30060)),
			port("moved", proxy.UDP, "172.30.0.21", 53, servedBy("198.19.1.2:53")))
		r.Observe(before, model.Changes{})
		r.Reconcile(context.Background())
		keep := udp("172.30.0.22:53", "198.19.1.2:53")
		ct.Add(udp("172.30.0.20:53", "198.19.1.2:53"), udp("198.18.0.11:30060", "198.19.1.2:53"),
			udp("172.30.0.21:53", "198.19.1.2:53"), keep)

		after := next(before, []string{"old"}, port("moved", proxy.UDP, "172.30.0.22", 53, servedBy("198.19.1.2:53")))
		if full {
			after.Changed = nil
		}
		r.Observe(after, cleanup)
		if _, err := r.Reconcile(context.Background()); err != nil {
			t.Fatal(err)
		}
		if got := ct.Flows(); !slices.Equal(got, []kconntrack.Flow{keep}) {
			t.Errorf("full=%v: left %v, want only %v", full, got, keep)
		}
	}
}

func TestBudgetSplitsRounds(t *testing.T) {
	ct := &kconntrack.Fake{}
	for i := range 5 {
		f := udp("172.30.0.13:53", "172.30.0.13:53")
		f.Orig.Src = netip.AddrPortFrom(f.Orig.Src.Addr(), uint16(1000+i))
		ct.Add(f)
	}
	r := New(proxy.IPv4, ct, Options{Chunk: 2, RoundBudget: time.Nanosecond})
	r.Observe(world(), cleanup)
	rounds := 0
	for {
		res, err := r.Reconcile(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if !res.Ran {
			break
		}
		rounds++
		if res.Deleted != 2 && !res.Complete {
			t.Fatalf("round %d deleted %d before checking its budget", rounds, res.Deleted)
		}
	}
	if rounds != 3 || len(ct.Flows()) != 0 {
		t.Fatalf("%d rounds, %d flows left; want 3 rounds and none", rounds, len(ct.Flows()))
	}
}

func TestFailedRoundStaysDue(t *testing.T) {
	ct := &kconntrack.Fake{ListErr: errors.New("netlink broke")}
	ct.Add(udp("172.30.0.13:53", "172.30.0.13:53"))
	r := New(proxy.IPv4, ct, Options{})
	r.Observe(world(), cleanup)
	if _, err := r.Reconcile(context.Background()); err == nil {
		t.Fatal("list error not reported")
	}
	ct.ListErr, ct.DeleteErr = nil, errors.New("netlink broke again")
	if _, err := r.Reconcile(context.Background()); err == nil {
		t.Fatal("delete error not reported")
	}
	ct.DeleteErr = nil
	if res, err := r.Reconcile(context.Background()); err != nil || res.Deleted != 1 {
		t.Fatalf("retry: %+v, %v", res, err)
	}
}

// interleaved calls hook during its dump, as a sync landing meanwhile.
type interleaved struct {
	*kconntrack.Fake
	hook func()
}

func (i interleaved) List(ctx context.Context, f proxy.IPFamily, visit func(kconntrack.Flow)) error {
	i.hook()
	return i.Fake.List(ctx, f, visit)
}

// A sync that adds an endpoint while a round lists flows: the new
// endpoint's flows, stale to the round's older State, must stay.
func TestNewerStateSparesNewFlows(t *testing.T) {
	ct := &kconntrack.Fake{}
	fresh := udp("172.30.0.10:53", "198.19.1.6:53")
	dead := udp("172.30.0.13:53", "172.30.0.13:53")
	ct.Add(fresh, dead)
	old := state(port("dns", proxy.UDP, "172.30.0.10", 53, servedBy("198.19.1.2:53")), port("empty", proxy.UDP, "172.30.0.13", 53))
	newer := next(old, nil, port("dns", proxy.UDP, "172.30.0.10", 53, servedBy("198.19.1.2:53", "198.19.1.6:53")))
	var r *Reconciler
	r = New(proxy.IPv4, interleaved{ct, func() { r.Observe(newer, model.Changes{}) }}, Options{})
	r.Observe(old, cleanup)
	if _, err := r.Reconcile(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := ct.Flows(); !slices.Equal(got, []kconntrack.Flow{fresh}) {
		t.Fatalf("left %v, want only the new endpoint's flow", got)
	}
}

func TestRunDeletesInBackgroundAndCounts(t *testing.T) {
	ct := &kconntrack.Fake{}
	ct.Add(udp("172.30.0.13:53", "172.30.0.13:53"), udp("172.30.0.10:53", "198.19.1.2:53"))
	deleted := metrics.ReconcileConntrackFlowsDeletedEntriesTotal.WithLabelValues("IPv4")
	before := read(t, deleted).GetCounter().GetValue()
	observed := read(t, metrics.ReconcileConntrackFlowsLatency.WithLabelValues("IPv4")).GetHistogram().GetSampleCount()
	r := New(proxy.IPv4, ct, Options{})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { r.Run(ctx); close(done) }()
	defer cancel()

	start := time.Now()
	r.Observe(world(), cleanup)
	if since := time.Since(start); since > 10*time.Millisecond {
		t.Errorf("Observe took %v; it must not wait for the round", since)
	}
	for len(ct.Flows()) != 1 {
		if time.Since(start) > 5*time.Second {
			t.Fatal("Run did not delete the stale flow")
		}
		time.Sleep(5 * time.Millisecond)
	}
	cancel()
	<-done
	if got := read(t, deleted).GetCounter().GetValue() - before; got != 1 {
		t.Errorf("deleted entries metric rose by %v, want 1", got)
	}
	if n := read(t, metrics.ReconcileConntrackFlowsLatency.WithLabelValues("IPv4")).GetHistogram().GetSampleCount(); n <= observed {
		t.Error("no sync duration observed")
	}
}

// TestReportReplacesConntrackMetrics: a reconciler over another table
// (ebpf mode's sockets) reports its rounds to Report and leaves the
// conntrack metrics alone.
func TestReportReplacesConntrackMetrics(t *testing.T) {
	ct := &kconntrack.Fake{}
	ct.Add(udp("172.30.0.10:53", "198.19.1.2:53"), udp("198.18.100.10:53", "198.19.9.9:53"))
	deleted := metrics.ReconcileConntrackFlowsDeletedEntriesTotal.WithLabelValues("IPv4")
	before := read(t, deleted).GetCounter().GetValue()
	var reported []Result
	r := New(proxy.IPv4, ct, Options{Table: "sockets", Report: func(res Result, _ time.Duration) { reported = append(reported, res) }})
	r.Observe(world(), cleanup)
	if _, err := r.Reconcile(context.Background()); err != nil {
		t.Fatal(err)
	}
	if len(reported) != 1 || reported[0].Deleted != 1 || len(ct.Flows()) != 1 {
		t.Errorf("reported %+v with %d flows left, want one round that deleted the stale flow", reported, len(ct.Flows()))
	}
	if got := read(t, deleted).GetCounter().GetValue() - before; got != 0 {
		t.Errorf("the conntrack deleted-entries metric rose by %v, want 0", got)
	}
}

func read(t *testing.T, m any) *dto.Metric {
	t.Helper()
	w, ok := m.(interface{ Write(*dto.Metric) error })
	if !ok {
		t.Fatalf("%T is not a metric", m)
	}
	var out dto.Metric
	if err := w.Write(&out); err != nil {
		t.Fatal(err)
	}
	return &out
}

// TestRetiredWorkIsBounded: while every round fails, syncs keep retiring
// ports and whole States. What is kept for the next round must stay
// bounded, and what the bound drops must still be deleted once rounds work.
func TestRetiredWorkIsBounded(t *testing.T) {
	ct := &kconntrack.Fake{ListErr: errors.New("netlink broke")}
	r := New(proxy.IPv4, ct, Options{})
	live := port("live", proxy.UDP, "172.30.0.10", 53, servedBy("198.19.1.2:53"))
	prev := state(live)
	r.Observe(prev, cleanup)
	// Each sync removes one UDP service (a new cluster IP every time).
	const removed = maxRetiredPorts + 100
	for i := range removed {
		gone := port(fmt.Sprintf("gone%d", i), proxy.UDP, fmt.Sprintf("172.31.%d.%d", i/250, i%250+1), 53, servedBy("198.19.1.9:53"))
		prev = next(next(prev, nil, gone), []string{gone.Name.Name})
		r.Observe(prev, cleanup)
		if i%1000 == 0 {
			if _, err := r.Reconcile(context.Background()); err == nil {
				t.Fatal("list error not reported")
			}
		}
	}
	for range maxRetiredStates + 2 {
		full := next(prev, nil)
		full.Changed = nil
		r.Observe(full, cleanup)
		prev = full
	}
	r.mu.Lock()
	ports, states, sweep := len(r.retired), len(r.retiredStates), r.sweep
	r.mu.Unlock()
	if ports > maxRetiredPorts || states > maxRetiredStates || !sweep {
		t.Fatalf("kept %d retired ports and %d States (sweep=%v); want at most %d and %d, and a sweep",
			ports, states, sweep, maxRetiredPorts, maxRetiredStates)
	}

	ct.ListErr = nil
	first, last := udp("172.31.0.1:53", "198.19.1.9:53"), udp("172.31.16.100:53", "198.19.1.9:53")
	keep := []kconntrack.Flow{
		udp("172.30.0.10:53", "198.19.1.2:53"), // a live service's flow
		udp("198.19.1.6:53", "198.19.1.6:53"),  // pod to pod: never DNATed
	}
	ct.Add(append([]kconntrack.Flow{first, last}, keep...)...)
	if _, err := r.Reconcile(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := ct.Flows(); !slices.Equal(got, keep) {
		t.Errorf("after the sweep left %v, want %v", got, keep)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.sweep {
		t.Error("a complete round left the sweep pending")
	}
}

// TestFailedRoundsBackOff: a conntrack dump that keeps failing is retried
// after 1, 2, 4 … s, at most every MaxRetryAfter, not every second.
func TestFailedRoundsBackOff(t *testing.T) {
	r := New(proxy.IPv4, &kconntrack.Fake{}, Options{})
	var got []time.Duration
	for r.failures = 1; r.failures <= 7; r.failures++ {
		got = append(got, r.retryWait())
	}
	want := []time.Duration{1, 2, 4, 8, 16, 30, 30}
	for i := range want {
		want[i] *= time.Second
	}
	if !slices.Equal(got, want) {
		t.Errorf("waits %v, want %v", got, want)
	}

	// A failed round counts, a successful one resets.
	ct := &kconntrack.Fake{ListErr: errors.New("netlink broke")}
	r = New(proxy.IPv4, ct, Options{RetryAfter: time.Millisecond})
	r.Observe(world(), cleanup)
	if !r.roundDue(context.Background()) || r.failures != 1 {
		t.Fatalf("after a failed round: failures=%d, want 1 and another round", r.failures)
	}
	ct.ListErr = nil
	r.roundDue(context.Background())
	if r.failures != 0 {
		t.Errorf("after a good round: failures=%d, want 0", r.failures)
	}
}
