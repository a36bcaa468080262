package app

import (
	"context"
	"errors"
	"net/netip"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	v1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/events"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/svcproxy/svcproxy/internal/backends"
	"github.com/svcproxy/svcproxy/internal/config"
	"github.com/svcproxy/svcproxy/internal/debugstate"
	"github.com/svcproxy/svcproxy/internal/explain"
	"github.com/svcproxy/svcproxy/internal/healthz"
	"github.com/svcproxy/svcproxy/internal/servicehealth"
	"github.com/svcproxy/svcproxy/pkg/kconntrack"
	"github.com/svcproxy/svcproxy/pkg/pipeline/desired"
	"github.com/svcproxy/svcproxy/pkg/pipeline/syncer"
	"github.com/svcproxy/svcproxy/pkg/pipeline/watch"
	"github.com/svcproxy/svcproxy/pkg/proxy"
	"github.com/svcproxy/svcproxy/pkg/testing/proxytest"
)

// testMode is a mode of this test's own: its backend is rowProxier, its
// row testRow. Nothing outside this file knows of it.
const testMode proxy.Mode = "test"

// rowProxier is the test mode's backend: one object for both families, as
// the eBPF backend will be. It records what the app and the syncer ask.
type rowProxier struct {
	mu        sync.Mutex
	inits     int
	readBacks int
	synced    map[proxy.IPFamily]*desired.State
	fail      error
}

func (p *rowProxier) Init(context.Context) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.inits++
	return nil
}

func (p *rowProxier) Sync(_ context.Context, st *desired.State, _ proxy.SyncMode) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.fail != nil {
		return p.fail
	}
	p.synced[st.Family] = st
	return nil
}

func (p *rowProxier) CanaryMissing(context.Context) (bool, error) { return false, nil }
func (p *rowProxier) Cleanup(context.Context) error               { return nil }

func (p *rowProxier) ReadBack(context.Context) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.readBacks++
	return nil
}

func (p *rowProxier) lastSync(f proxy.IPFamily) *desired.State {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.synced[f]
}

// leftoverLog records whose leftovers were removed.
type leftoverLog struct {
	mu      sync.Mutex
	removed []proxy.Mode
}

func (l *leftoverLog) remover(mode proxy.Mode) func(context.Context, *config.Config) error {
	return func(context.Context, *config.Config) error {
		l.mu.Lock()
		defer l.mu.Unlock()
		l.removed = append(l.removed, mode)
		return nil
	}
}

func (l *leftoverLog) modes() []proxy.Mode {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.removed)
}

// colorAnnotation is the test mode's own extension annotation: a Service
// may ask for a color, which only the test backend would read.
const colorAnnotation = "test.svcproxy.io/color"

// colors is the test mode's own per-port decision (desired.PortSettings):
// red or blue, blue when not asked for, another value refused.
type colors struct{}

func (colors) PortSetting(ext map[string]string) *desired.PortSetting {
	switch v := ext[colorAnnotation]; v {
	case "", "blue":
		return &desired.PortSetting{Value: "blue"}
	case "red":
		return &desired.PortSetting{Value: v}
	default:
		return &desired.PortSetting{Value: "blue", Refused: v}
	}
}

// testRow is the test mode's one row: everything the app needs of it.
func testRow(p *rowProxier, failures *prometheus.CounterVec, log *leftoverLog) backends.Backend {
	return backends.Backend{
		Mode:     testMode,
		Families: func() []proxy.IPFamily { return proxy.Families },
		Open: func(_ context.Context, env backends.Env) (*backends.Instance, error) {
			inst := &backends.Instance{Proxiers: map[proxy.IPFamily]syncer.Backend{}}
			for _, f := range env.Families {
				inst.Proxiers[f] = syncer.Backend{Proxier: p, Preparer: p}
			}
			return inst, nil
		},
		Decide: func(_ *config.Config, o *desired.Options) {
			o.DropUnallocated = true
			o.PortSettings = colors{}
		},
		RefusedSetting: func(value string) backends.Warning {
			return backends.Warning{Reason: "InvalidTestColor", Message: "no such color: " + value}
		},
		RemoveLeftovers: log.remover(testMode),
		Objects: func(_ context.Context, _ *desired.State, e explain.Explanation) ([]string, error) {
			return []string{"test object of " + e.Port.Name.String()}, nil
		},
		SyncFailures: failures,
		Metrics:      []prometheus.Collector{failures},
	}
}

// TestBackendIsOneRow: a backend the app has never heard of, registered by
// its one row, is selected by its mode, opened, initialized, prepared and
// synced through the app's syncers; its own per-port decision reaches the
// State it syncs and the annotation it refuses an Event; its failure
// counter counts, its metric family is served, explain asks it for object
// names, and the app removes the other modes' leftovers but not its own.
func TestBackendIsOneRow(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	p := &rowProxier{synced: map[proxy.IPFamily]*desired.State{}}
	failures := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "test_sync_failures_total", Help: "test"}, []string{"ip_family"})
	log := &leftoverLog{}
	other := backends.Backend{Mode: "other", RemoveLeftovers: log.remover("other")}
	reg := backends.Registry{other, testRow(p, failures, log)}

	cfg := mustRun(t, "--hostname-override=n1", "--proxy-mode=nftables", "--state-socket=")
	cfg.Mode = testMode // config accepts proxy.Modes only; the row is what this test proves
	d := rowDaemon(t, cfg, reg)
	annotate(ctx, t, d, map[string]string{colorAnnotation: "plaid"})
	families, feed, inst := openRow(ctx, t, d)
	if p.inits != 2 {
		t.Errorf("Init called %d times, want once per family", p.inits)
	}
	first := newFirstSyncs(families)
	syncers, err := d.newSyncers(ctx, inst, feed, &kconntrack.Fake{}, first)
	if err != nil {
		t.Fatal(err)
	}
	d.cleanupAfter(ctx, first.done)
	for _, s := range syncers {
		s.Prepare(ctx)
		go s.Loop(ctx)
	}
	web := proxy.ServicePortName{ServiceName: proxy.ServiceName{Namespace: "ns", Name: "web"}, Port: "http", Protocol: proxy.TCP}
	eventually(t, "both families synced with ns/web", func() bool {
		v4, v6 := p.lastSync(proxy.IPv4), p.lastSync(proxy.IPv6)
		return v4 != nil && v6 != nil && v4.Service(web) != nil
	})
	if p.readBacks == 0 {
		t.Error("the Preparer the row names was never asked to read back")
	}
	checkRowSetting(t, d, p.lastSync(proxy.IPv4).Service(web))
	eventually(t, "other modes' leftovers removed", func() bool { return len(log.modes()) > 0 })
	if got := log.modes(); !slices.Equal(got, []proxy.Mode{"other"}) {
		t.Errorf("leftovers removed of %v, want [other] only", got)
	}

	checkRowMetrics(t, d, inst, failures, p, syncers[proxy.IPv4])
	e := explain.Explain(p.lastSync(proxy.IPv4), explain.Packet{Protocol: proxy.TCP,
		Dest: netip.MustParseAddr("10.96.0.10"), Port: 80})
	objs, err := kernelObjects(ctx, reg, testMode, p.lastSync(proxy.IPv4), e)
	if err != nil || !slices.Equal(objs, []string{"test object of " + web.String()}) {
		t.Errorf("explain's objects %q, %v: want the row's", objs, err)
	}
}

// annotate sets the annotations of d's Service ns/web.
func annotate(ctx context.Context, t *testing.T, d *daemon, annotations map[string]string) {
	t.Helper()
	svc, err := d.client.CoreV1().Services("ns").Get(ctx, "web", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	svc.Annotations = annotations
	if _, err := d.client.CoreV1().Services("ns").Update(ctx, svc, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// checkRowSetting: the test mode's own decision for ns/web, whose
// annotation asks for a color it refuses, is on the port the backend
// synced, and the row's Warning reached the API server.
func checkRowSetting(t *testing.T, d *daemon, sp *desired.ServicePort) {
	t.Helper()
	if want := (desired.PortSetting{Value: "blue", Refused: "plaid"}); sp.Setting == nil || *sp.Setting != want {
		t.Errorf("the synced port's setting is %+v, want %+v", sp.Setting, want)
	}
	eventually(t, "the row's Warning about the refused annotation", func() bool {
		return slices.ContainsFunc(createdEvents(d.client.(*fake.Clientset)), func(ev *eventsv1.Event) bool {
			return ev.Reason == "InvalidTestColor" && ev.Note == "no such color: plaid" && ev.Regarding.Name == "web"
		})
	})
}

// checkRowMetrics: a failed sync counts in the row's counter, which the
// metrics server registers.
func checkRowMetrics(t *testing.T, d *daemon, inst *backends.Instance, failures *prometheus.CounterVec, p *rowProxier, s *syncer.Syncer) {
	t.Helper()
	p.mu.Lock()
	p.fail = errors.New("refused")
	p.mu.Unlock()
	s.RequestFull()
	eventually(t, "a failed sync counted", func() bool { return counterOf(t, failures.WithLabelValues("IPv4")) > 0 })
	gatherer, err := registerMetricsIn(prometheus.NewRegistry(), d.cfg, metricsOptions(d.backend, inst.Metrics))
	if err != nil {
		t.Fatal(err)
	}
	mfs, err := gatherer.Gather()
	if err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(mfs, func(mf *dto.MetricFamily) bool { return mf.GetName() == "test_sync_failures_total" }) {
		t.Error("the row's failure family is not served")
	}
}

// openRow starts d's feed and opens its row's backend for the families
// the row serves; the instance is closed at the end of the test.
func openRow(ctx context.Context, t *testing.T, d *daemon) ([]proxy.IPFamily, *feed, *backends.Instance) {
	t.Helper()
	families := d.backend.Families()
	feed, err := d.startFeed(ctx, families)
	if err != nil {
		t.Fatal(err)
	}
	inst, err := openBackend(ctx, d.backend, d.cfg, families, false)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(inst.Close)
	return families, feed, inst
}

// rowDaemon is a daemon over a fake API server holding Service ns/web
// (cluster IP 10.96.0.10, one ready endpoint), whose Node is known and
// whose mode's row is taken from reg.
func rowDaemon(t *testing.T, cfg *config.Config, reg backends.Registry) *daemon {
	t.Helper()
	b, err := reg.Lookup(cfg.Mode)
	if err != nil {
		t.Fatal(err)
	}
	svc := proxytest.MakeService("ns", "web", func(s *v1.Service) {
		s.Spec.ClusterIP, s.Spec.ClusterIPs = "10.96.0.10", []string{"10.96.0.10"}
		s.Spec.Ports = []v1.ServicePort{{Name: "http", Port: 80, Protocol: v1.ProtocolTCP}}
	})
	slice := proxytest.Slice("ns", "web", []proxytest.SlicePort{{Name: "http", Port: 8080, Protocol: v1.ProtocolTCP}},
		proxytest.EP{IP: netip.MustParseAddr("10.0.1.2")})
	client := fake.NewClientset(svc, slice)
	d := &daemon{cfg: cfg, registry: reg, backend: b, logger: klog.Background(), client: client, nodeName: "n1",
		node: newNodeView("n1", cfg.BindAddress), health: healthz.New(cfg.SyncPeriod, clock.RealClock{}),
		events: &eventSink{recorder: events.NewFakeRecorder(10), nodeName: "n1", shared: newSharedEvents(t.Context(), client)},
		state:  debugstate.NewRecorder(), fatal: make(chan error, 4)}
	d.svcHealth = servicehealth.New(d.health.Healthy, d.events.healthCheckFailed)
	d.node.hostAddrs = func() []netip.Addr { return nil }
	d.node.set(watch.NodeInfo{Name: "n1", IPs: []netip.Addr{netip.MustParseAddr("192.168.0.2")}})
	return d
}

func counterOf(t *testing.T, c prometheus.Counter) float64 {
	t.Helper()
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetCounter().GetValue()
}

// eventually waits up to 10 s for cond.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	err := wait.PollUntilContextTimeout(context.Background(), 10*time.Millisecond, 10*time.Second, true,
		func(context.Context) (bool, error) { return cond(), nil })
	if err != nil {
		t.Fatalf("waiting for %s: %v", what, err)
	}
}
