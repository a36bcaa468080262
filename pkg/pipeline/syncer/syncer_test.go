package syncer

import (
	"context"
	"errors"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr/funcr"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	v1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/klog/v2"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/svcproxy/svcproxy/pkg/pipeline/desired"
	"github.com/svcproxy/svcproxy/pkg/pipeline/metrics"
	"github.com/svcproxy/svcproxy/pkg/pipeline/model"
	"github.com/svcproxy/svcproxy/pkg/proxy"
	"github.com/svcproxy/svcproxy/pkg/testing/proxytest"
)

// IP plan: services 172.30.0.0/16, pods 10.0.0.0/8 (as proxytest's world).

const (
	minSyncPeriod = time.Second
	syncPeriod    = 30 * time.Second
)

// fakeProxier records every State and mode it is given, fails when told
// to, and reports its canary as told.
type fakeProxier struct {
	mu     sync.Mutex
	states []*desired.State
	modes  []proxy.SyncMode
	fail   error
	// report, if set, answers the next Sync in mode (and is then cleared).
	report     func(mode proxy.SyncMode) error
	calls      chan *desired.State
	canaryGone bool
	canaryErr  error
}

func (p *fakeProxier) Init(context.Context) error    { return nil }
func (p *fakeProxier) Cleanup(context.Context) error { return nil }
func (p *fakeProxier) Sync(_ context.Context, s *desired.State, mode proxy.SyncMode) error {
	p.mu.Lock()
	p.states = append(p.states, s)
	p.modes = append(p.modes, mode)
	err := p.fail
	if p.report != nil {
		err, p.report = p.report(mode), nil
	}
	p.mu.Unlock()
	if p.calls != nil {
		p.calls <- s
	}
	return err
}

func (p *fakeProxier) CanaryMissing(context.Context) (bool, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.canaryGone, p.canaryErr
}

func (p *fakeProxier) setFail(err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.fail = err
}

func (p *fakeProxier) last(t *testing.T) *desired.State {
	t.Helper()
	st, _ := p.lastCall(t)
	return st
}

// lastCall is the State and mode of the last Sync.
func (p *fakeProxier) lastCall(t *testing.T) (*desired.State, proxy.SyncMode) {
	t.Helper()
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.states) == 0 {
		t.Fatal("Proxier.Sync never called")
	}
	return p.states[len(p.states)-1], p.modes[len(p.modes)-1]
}

func (p *fakeProxier) count() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.states)
}

type fakeHealth struct {
	mu      sync.Mutex
	queued  int
	updated int
}

func (h *fakeHealth) QueuedUpdate(proxy.IPFamily) { h.mu.Lock(); h.queued++; h.mu.Unlock() }
func (h *fakeHealth) Updated(proxy.IPFamily)      { h.mu.Lock(); h.updated++; h.mu.Unlock() }

type fakeServiceHealth struct{ checks []desired.HealthCheck }

func (f *fakeServiceHealth) Sync(_ desired.NodePortAddrs, _ proxy.IPFamily, checks []desired.HealthCheck) {
	f.checks = checks
}

type fixture struct {
	t       *testing.T
	clock   *clocktesting.FakeClock
	tracker *model.Tracker
	proxier *fakeProxier
	health  *fakeHealth
	svcHC   *fakeServiceHealth
	node    desired.Node
	nodeOK  bool
	nodeMu  sync.Mutex
	syncer  *Syncer
	after   []model.Changes
}

// newFixture is a syncer over fakes that counts its failed syncs in failures.
func newFixture(t *testing.T, failures *prometheus.CounterVec) *fixture {
	t.Helper()
	f := &fixture{
		t:       t,
		clock:   clocktesting.NewFakeClock(time.Now().Truncate(time.Second).Add(time.Minute)),
		tracker: model.NewTracker(proxy.IPv4),
		proxier: &fakeProxier{},
		health:  &fakeHealth{},
		svcHC:   &fakeServiceHealth{},
		node:    proxytest.NodeOf(proxytest.MakeNode(proxytest.NodeName, nil)),
		nodeOK:  true,
	}
	s, err := New(Options{
		Family: proxy.IPv4, SyncFailures: failures, Tracker: f.tracker, Proxier: Backend{Proxier: f.proxier},
		Node: func() (desired.Node, bool) {
			f.nodeMu.Lock()
			defer f.nodeMu.Unlock()
			return f.node, f.nodeOK
		},
		Compute:       desired.Options{MasqueradeBit: 14},
		Health:        f.health,
		ServiceHealth: f.svcHC,
		MinSyncPeriod: minSyncPeriod, SyncPeriod: syncPeriod, Clock: f.clock,
		AfterSync: func(_ *desired.State, c model.Changes) { f.after = append(f.after, c) },
	})
	if err != nil {
		t.Fatal(err)
	}
	f.tracker.SetEventCounter(ChangeCounter{})
	f.syncer = s
	return f
}

func (f *fixture) markSynced() {
	f.tracker.OnServicesSynced()
	f.tracker.OnEndpointSlicesSynced()
}

func webService(edit func(*v1.Service)) *v1.Service {
	return proxytest.MakeService("ns", "web", func(svc *v1.Service) {
		svc.Spec.ClusterIP = "172.30.0.10"
		svc.Spec.ClusterIPs = []string{"172.30.0.10"}
		svc.Spec.Ports = []v1.ServicePort{{Name: "http", Protocol: v1.ProtocolTCP, Port: 80}}
		if edit != nil {
			edit(svc)
		}
	})
}

func webSlice(trigger time.Time, ips ...string) *discoveryv1.EndpointSlice {
	var eps []proxytest.EP
	for _, ip := range ips {
		eps = append(eps, proxytest.EP{IP: netip.MustParseAddr(ip), Node: proxytest.NodeName})
	}
	s := proxytest.Slice("ns", "web", []proxytest.SlicePort{{Name: "http", Port: 8080, Protocol: v1.ProtocolTCP}}, eps...)
	if !trigger.IsZero() {
		s.Annotations = map[string]string{v1.EndpointsLastChangeTriggerTime: trigger.Format(time.RFC3339Nano)}
	}
	return s
}

var webPort = proxy.ServicePortName{ServiceName: proxy.ServiceName{Namespace: "ns", Name: "web"}, Port: "http", Protocol: proxy.TCP}

func (f *fixture) mustSync() *desired.State {
	f.t.Helper()
	n := f.proxier.count()
	if err := f.syncer.syncOnce(); err != nil {
		f.t.Fatalf("sync: %v", err)
	}
	if f.proxier.count() != n+1 {
		f.t.Fatalf("Proxier.Sync called %d times, want 1", f.proxier.count()-n)
	}
	return f.proxier.last(f.t)
}

func TestNoSyncBeforeTrackerSyncedAndNodeKnown(t *testing.T) {
	f := newFixture(t, metrics.NFTablesSyncFailuresTotal)
	f.tracker.OnServiceUpdate(nil, webService(nil))
	if err := f.syncer.syncOnce(); err != nil || f.proxier.count() != 0 {
		t.Fatalf("synced before the tracker: err=%v calls=%d", err, f.proxier.count())
	}
	f.tracker.OnServicesSynced()
	if err := f.syncer.syncOnce(); err != nil || f.proxier.count() != 0 {
		t.Fatalf("synced with endpoint slices unsynced: err=%v calls=%d", err, f.proxier.count())
	}
	f.tracker.OnEndpointSlicesSynced()
	f.nodeOK = false
	if err := f.syncer.syncOnce(); err != nil || f.proxier.count() != 0 {
		t.Fatalf("synced without a node: err=%v calls=%d", err, f.proxier.count())
	}
	f.nodeOK = true
	st := f.mustSync()
	if st.Changed != nil || st.Service(webPort) == nil {
		t.Fatalf("first sync: Changed=%v services=%v, want a full state with ns/web", st.Changed, st.Services)
	}
}

func TestPartialAfterFullAndFullAfterFailure(t *testing.T) {
	f := newFixture(t, metrics.NFTablesSyncFailuresTotal)
	f.markSynced()
	f.tracker.OnServiceUpdate(nil, webService(nil))
	if st := f.mustSync(); st.Changed != nil {
		t.Fatal("first sync not full")
	}
	f.tracker.OnEndpointSliceUpdate(nil, webSlice(time.Time{}, "10.0.1.1"))
	st := f.mustSync()
	if _, ok := st.Changed[webPort]; !ok || len(st.Changed) != 1 {
		t.Fatalf("partial sync Changed = %v, want just %v", st.Changed, webPort)
	}

	failures := counterValue(t, metrics.NFTablesSyncFailuresTotal.WithLabelValues("IPv4"))
	f.proxier.setFail(errors.New("nft: boom"))
	f.tracker.OnEndpointSliceUpdate(webSlice(time.Time{}, "10.0.1.1"), webSlice(time.Time{}, "10.0.1.2"))
	if err := f.syncer.syncOnce(); err == nil {
		t.Fatal("failed Proxier.Sync not reported to the runner")
	}
	if got := counterValue(t, metrics.NFTablesSyncFailuresTotal.WithLabelValues("IPv4")) - failures; got != 1 {
		t.Errorf("nftables_sync_failures_total +%v, want +1", got)
	}

	f.proxier.setFail(nil)
	st = f.mustSync()
	if st.Changed != nil {
		t.Fatalf("sync after a failure has Changed=%v, want a full sync", st.Changed)
	}
	if eps := st.Service(webPort).Internal.Endpoints; len(eps) != 1 || eps[0].IP != netip.MustParseAddr("10.0.1.2") {
		t.Errorf("full sync after failure lost the failed change: %v", eps)
	}
}

// TestFailuresCountInTheGivenCounter: a failed sync counts in the counter
// the options name (the backend row's), and in no other.
func TestFailuresCountInTheGivenCounter(t *testing.T) {
	f := newFixture(t, metrics.IPTablesRestoreFailuresTotal)
	f.markSynced()
	before := counterValue(t, metrics.IPTablesRestoreFailuresTotal.WithLabelValues("IPv4"))
	other := counterValue(t, metrics.NFTablesSyncFailuresTotal.WithLabelValues("IPv4"))
	f.proxier.setFail(errors.New("iptables-restore: exit 1"))
	if err := f.syncer.syncOnce(); err == nil {
		t.Fatal("error not returned")
	}
	if got := counterValue(t, metrics.IPTablesRestoreFailuresTotal.WithLabelValues("IPv4")) - before; got != 1 {
		t.Errorf("iptables_restore_failures_total +%v, want +1", got)
	}
	if got := counterValue(t, metrics.NFTablesSyncFailuresTotal.WithLabelValues("IPv4")) - other; got != 0 {
		t.Errorf("nftables_sync_failures_total +%v, want +0", got)
	}
}

func TestFullSyncHourlyOnNodeChangeAndOnRequest(t *testing.T) {
	f := newFixture(t, metrics.IPTablesRestoreFailuresTotal)
	f.markSynced()
	f.mustSync()
	if f.mustSync().Changed == nil {
		t.Fatal("second sync without reason was full")
	}
	f.clock.Step(FullSyncPeriod - time.Second)
	if f.mustSync().Changed == nil {
		t.Fatal("full sync before an hour passed")
	}
	f.clock.Step(time.Second)
	if f.mustSync().Changed != nil {
		t.Fatal("no full sync an hour after the last one")
	}
	if f.mustSync().Changed == nil {
		t.Fatal("hourly full sync repeated at once")
	}

	f.nodeMu.Lock()
	f.node.Zone = "elsewhere"
	f.nodeMu.Unlock()
	if f.mustSync().Changed != nil {
		t.Fatal("node change did not force a full sync")
	}

	f.syncer.RequestFull()
	if f.mustSync().Changed != nil {
		t.Fatal("RequestFull did not force a full sync")
	}
	if f.mustSync().Changed == nil {
		t.Fatal("RequestFull stuck")
	}
}

func TestSuccessfulSyncUpdatesHealthAndMetrics(t *testing.T) {
	f := newFixture(t, metrics.NFTablesSyncFailuresTotal)
	f.markSynced()
	trigger := f.clock.Now()
	svcTotal := counterValue(t, metrics.ServiceChangesTotal)
	epTotal := counterValue(t, metrics.EndpointChangesTotal)
	npd := histogramCount(t, metrics.NetworkProgrammingLatency.WithLabelValues("IPv4"))
	full := histogramCount(t, metrics.SyncFullProxyRulesLatency.WithLabelValues("IPv4"))
	partial := histogramCount(t, metrics.SyncPartialProxyRulesLatency.WithLabelValues("IPv4"))

	f.tracker.OnServiceUpdate(nil, webService(func(svc *v1.Service) {
		svc.Spec.Type = v1.ServiceTypeLoadBalancer
		svc.Spec.Ports[0].NodePort = 30080
		svc.Spec.ExternalTrafficPolicy = v1.ServiceExternalTrafficPolicyLocal
		svc.Spec.HealthCheckNodePort = 32000
	}))
	f.tracker.OnEndpointSliceUpdate(nil, webSlice(trigger, "10.0.1.1"))
	// Counted per event, before any sync, as upstream's trackers do.
	if got := counterValue(t, metrics.ServiceChangesTotal) - svcTotal; got != 1 {
		t.Errorf("service_changes_total +%v before the sync, want +1", got)
	}
	if got := counterValue(t, metrics.EndpointChangesTotal) - epTotal; got != 1 {
		t.Errorf("endpoint_changes_total +%v before the sync, want +1", got)
	}
	if s, e := gaugeValue(t, metrics.ServiceChangesPending), gaugeValue(t, metrics.EndpointChangesPending); s != 1 || e != 1 {
		t.Errorf("pending gauges %v, %v before the sync, want 1, 1", s, e)
	}
	f.syncer.Request()
	f.clock.Step(2 * time.Second)
	f.mustSync()

	if got := gaugeValue(t, metrics.SyncProxyRulesLastTimestamp.WithLabelValues("IPv4")); got != unixSeconds(f.clock.Now()) {
		t.Errorf("last_timestamp = %v, want %v", got, unixSeconds(f.clock.Now()))
	}
	if got := histogramCount(t, metrics.NetworkProgrammingLatency.WithLabelValues("IPv4")) - npd; got != 1 {
		t.Errorf("network_programming_duration observations +%d, want +1", got)
	}
	if got := counterValue(t, metrics.ServiceChangesTotal) - svcTotal; got != 1 {
		t.Errorf("service_changes_total +%v, want +1", got)
	}
	if got := counterValue(t, metrics.EndpointChangesTotal) - epTotal; got != 1 {
		t.Errorf("endpoint_changes_total +%v, want +1", got)
	}
	if gaugeValue(t, metrics.ServiceChangesPending) != 0 || gaugeValue(t, metrics.EndpointChangesPending) != 0 {
		t.Error("pending gauges not cleared by the sync")
	}
	if got := histogramCount(t, metrics.SyncFullProxyRulesLatency.WithLabelValues("IPv4")) - full; got != 1 {
		t.Errorf("full sync histogram +%d, want +1", got)
	}
	if f.health.queued != 1 || f.health.updated != 1 {
		t.Errorf("health queued=%d updated=%d, want 1 and 1", f.health.queued, f.health.updated)
	}
	want := []desired.HealthCheck{{Service: webPort.ServiceName, Port: 32000, LocalReady: 1}}
	if len(f.svcHC.checks) != 1 || f.svcHC.checks[0] != want[0] {
		t.Errorf("service health checks = %+v, want %+v", f.svcHC.checks, want)
	}
	if len(f.after) != 1 || len(f.after[0].Changed) != 1 {
		t.Errorf("AfterSync saw %+v", f.after)
	}

	// The only local endpoint goes away: a partial sync, and the external
	// Local policy now has no local endpoint.
	f.tracker.OnEndpointSliceUpdate(webSlice(trigger, "10.0.1.1"), webSlice(time.Time{}))
	f.mustSync()
	if got := histogramCount(t, metrics.SyncPartialProxyRulesLatency.WithLabelValues("IPv4")) - partial; got != 1 {
		t.Errorf("partial sync histogram +%d, want +1", got)
	}
	ext := metrics.SyncProxyRulesNoLocalEndpointsTotal.WithLabelValues(metrics.TrafficPolicyExternal, "IPv4")
	if got := gaugeValue(t, ext); got != 1 {
		t.Errorf("no_local_endpoints_total{external} = %v, want 1", got)
	}
	if f.svcHC.checks[0].LocalReady != 0 {
		t.Errorf("health check still counts %d local endpoints", f.svcHC.checks[0].LocalReady)
	}
}

func TestRequestQueuesHealthOnlyOnceSynced(t *testing.T) {
	f := newFixture(t, metrics.NFTablesSyncFailuresTotal)
	f.syncer.Request()
	if f.health.queued != 0 {
		t.Fatal("QueuedUpdate before the tracker synced")
	}
	f.markSynced()
	f.clock.Step(3 * time.Second)
	f.syncer.Request()
	if f.health.queued != 1 {
		t.Fatal("QueuedUpdate not recorded")
	}
	if got := gaugeValue(t, metrics.SyncProxyRulesLastQueuedTimestamp.WithLabelValues("IPv4")); got != unixSeconds(f.clock.Now()) {
		t.Errorf("last_queued_timestamp = %v, want now", got)
	}
}

func TestLoopWaitsUntilReadyThenSyncsAtOnce(t *testing.T) {
	f := newFixture(t, metrics.NFTablesSyncFailuresTotal)
	f.proxier.calls = make(chan *desired.State, 10)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { f.syncer.Loop(ctx); close(done) }()
	defer func() { cancel(); <-done }()

	// Not synced: the loop only polls; stepping the clock never syncs.
	waitFor(t, f.clock.HasWaiters)
	f.clock.Step(readyPollInterval)
	waitFor(t, f.clock.HasWaiters)
	if f.proxier.count() != 0 {
		t.Fatal("synced before the tracker")
	}

	// Synced: the very next Request syncs without waiting for minSyncPeriod.
	f.markSynced()
	f.syncer.Request()
	select {
	case st := <-f.proxier.calls:
		if st.Changed != nil {
			t.Error("first sync from the loop is not full")
		}
	case <-time.After(30 * time.Second): // hang guard only
		t.Fatal("no sync after the tracker synced")
	}
}

func TestNewRequiresCollaborators(t *testing.T) {
	if _, err := New(Options{Family: proxy.IPv4}); err == nil {
		t.Fatal("New accepted options without Tracker, Proxier and Node")
	}
}

type writer interface{ Write(*dto.Metric) error }

func read(t *testing.T, c any) *dto.Metric {
	t.Helper()
	w, ok := c.(writer)
	if !ok {
		t.Fatalf("%T cannot be read", c)
	}
	var m dto.Metric
	if err := w.Write(&m); err != nil {
		t.Fatal(err)
	}
	return &m
}

func counterValue(t *testing.T, c prometheus.Counter) float64 {
	return read(t, c).GetCounter().GetValue()
}
func gaugeValue(t *testing.T, g prometheus.Gauge) float64 { return read(t, g).GetGauge().GetValue() }
func histogramCount(t *testing.T, o prometheus.Observer) uint64 {
	return read(t, o).GetHistogram().GetSampleCount()
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second) // hang guard only
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition never became true")
		}
		time.Sleep(time.Millisecond)
	}
}

// The real collaborators fit the syncer's interfaces.
var (
	_ Tracker = (*model.Tracker)(nil)
)

// TestFirstSyncLoggedOnce: the first successful sync of a family says so
// in the log, with what it cost; later syncs do not.
// firstSyncLines sends klog to a recorder until the test ends and returns
// the "First sync programmed" lines logged so far.
func firstSyncLines(t *testing.T) func() []string {
	var mu sync.Mutex
	var lines []string
	klog.SetLogger(funcr.New(func(_, args string) {
		mu.Lock()
		lines = append(lines, args)
		mu.Unlock()
	}, funcr.Options{}))
	t.Cleanup(klog.ClearLogger)
	return func() []string {
		mu.Lock()
		defer mu.Unlock()
		var first []string
		for _, l := range lines {
			if strings.Contains(l, "First sync programmed") {
				first = append(first, l)
			}
		}
		return first
	}
}

func TestFirstSyncLoggedOnce(t *testing.T) {
	logged := firstSyncLines(t)
	f := newFixture(t, metrics.NFTablesSyncFailuresTotal)
	f.markSynced()
	f.tracker.OnServiceUpdate(nil, webService(nil))
	f.mustSync()
	f.tracker.OnEndpointSliceUpdate(nil, webSlice(time.Time{}, "10.0.0.1"))
	f.clock.Step(minSyncPeriod)
	f.mustSync()
	first := logged()
	if len(first) != 1 || !strings.Contains(first[0], `"ipFamily"="IPv4"`) || !strings.Contains(first[0], `"servicePorts"=1`) ||
		!strings.Contains(first[0], `"elapsed"`) {
		t.Errorf("logged %q, want one first-sync line with the family, service ports and elapsed time", first)
	}
}
