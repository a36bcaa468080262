package backends

import (
	"context"
	"errors"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/svcproxy/svcproxy/internal/config"
	"github.com/svcproxy/svcproxy/pkg/pipeline/backends/ebpf/nodeport"
	"github.com/svcproxy/svcproxy/pkg/pipeline/desired"
	"github.com/svcproxy/svcproxy/pkg/proxy"
)

// meetingHalf is one half of ebpf mode whose Sync returns only once the
// other half's Sync has started too (or fails after a while): the halves
// must run at once.
type meetingHalf struct {
	mine, other chan struct{}
	err         error
}

func (h *meetingHalf) Init(context.Context) error                  { return nil }
func (h *meetingHalf) CanaryMissing(context.Context) (bool, error) { return false, nil }
func (h *meetingHalf) Cleanup(context.Context) error               { return nil }

func (h *meetingHalf) Sync(context.Context, *desired.State, proxy.SyncMode) error {
	close(h.mine)
	select {
	case <-h.other:
		return h.err
	case <-time.After(2 * time.Second):
		return errors.New("the other half did not start while this one ran")
	}
}

func TestSyncBothRunsTheHalvesAtOnce(t *testing.T) {
	a, b := make(chan struct{}), make(chan struct{})
	errHooks, errRules := errors.New("hooks failed"), errors.New("rules failed")
	hooks := &meetingHalf{mine: a, other: b, err: errHooks}
	rules := &meetingHalf{mine: b, other: a, err: errRules}
	served, err := syncBoth(context.Background(), &desired.State{}, proxy.FullSync, hooks, rules)
	if !errors.Is(err, errHooks) || !errors.Is(err, errRules) {
		t.Errorf("syncBoth = %v, want both halves' own errors (each met the other)", err)
	}
	if !served.IsZero() {
		t.Errorf("syncBoth served the hooks at %v although they failed, want zero", served)
	}
}

// timedHalf is a half whose Sync takes d and returns err.
type timedHalf struct {
	d   time.Duration
	err error
}

func (h timedHalf) Init(context.Context) error                  { return nil }
func (h timedHalf) CanaryMissing(context.Context) (bool, error) { return false, nil }
func (h timedHalf) Cleanup(context.Context) error               { return nil }

func (h timedHalf) Sync(context.Context, *desired.State, proxy.SyncMode) error {
	time.Sleep(h.d)
	return h.err
}

// TestServedAtIsTheHooksHalf: the row reports when the hooks' maps held the
// State, not when the slower nftables half ended; a failed rules half still
// fails the sync, and a failed hooks half reports no time.
func TestServedAtIsTheHooksHalf(t *testing.T) {
	errRules := errors.New("rules failed")
	start := time.Now()
	served, err := syncBoth(context.Background(), &desired.State{}, proxy.FullSync, timedHalf{}, timedHalf{d: 300 * time.Millisecond, err: errRules})
	end := time.Now()
	if !errors.Is(err, errRules) {
		t.Errorf("syncBoth = %v, want the rules half's error", err)
	}
	if served.Before(start) || end.Sub(served) < 200*time.Millisecond {
		t.Errorf("hooks served %v after the start and %v before the end, want at the start, well before the rules half ended",
			served.Sub(start), end.Sub(served))
	}
	served, err = syncBoth(context.Background(), &desired.State{}, proxy.FullSync, timedHalf{err: errRules}, timedHalf{})
	if err == nil || !served.IsZero() {
		t.Errorf("a failed hooks half: syncBoth = %v, %v; want its error and no time", served, err)
	}
}

// TestTCFlowsDeletedMetric: the flows the conntrack cleanup deleted from
// the tc programs' table are a counter of svcproxy's own, per IP family
// (IPv4, the only one tc serves), read from the table's count (which the
// nodeport package's kernel tests check).
func TestTCFlowsDeletedMetric(t *testing.T) {
	p, err := nodeport.New(nodeport.Options{PinDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(newTCFlowsCollector(p.Flows(), proxy.IPv4))
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	if len(families) != 1 || len(families[0].GetMetric()) != 1 {
		t.Fatalf("gathered %v, want one family of one metric", families)
	}
	mf, m := families[0], families[0].GetMetric()[0]
	labels := m.GetLabel()
	if mf.GetName() != "svcproxy_ebpf_tc_flows_deleted_total" || mf.GetType() != dto.MetricType_COUNTER ||
		len(labels) != 1 || labels[0].GetName() != "ip_family" || labels[0].GetValue() != "IPv4" || m.GetCounter().GetValue() != 0 {
		t.Errorf("gathered %v, want the counter svcproxy_ebpf_tc_flows_deleted_total{ip_family=\"IPv4\"} 0", mf)
	}
}

// TestTCDropsMetric: the tc programs' own drops are a counter per reason,
// read from their counters map when scraped (zeros before the programs are
// loaded; the nodeport package's kernel tests check the counts).
func TestTCDropsMetric(t *testing.T) {
	p, err := nodeport.New(nodeport.Options{PinDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(tcDropsCollector{p, []proxy.IPFamily{proxy.IPv4}})
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	if len(families) != 1 || families[0].GetName() != "svcproxy_ebpf_tc_dropped_packets_total" || families[0].GetType() != dto.MetricType_COUNTER {
		t.Fatalf("gathered %v, want the counter svcproxy_ebpf_tc_dropped_packets_total", families)
	}
	var reasons []string
	for _, m := range families[0].GetMetric() {
		for _, l := range m.GetLabel() {
			if l.GetName() == "reason" {
				reasons = append(reasons, l.GetValue())
			}
		}
	}
	if want := []string{"dsr_no_flow", "dsr_too_big", "no_masquerade_port", "reply_lost"}; !slices.Equal(reasons, want) {
		t.Errorf("reasons %v, want %v", reasons, want)
	}
}

// TestRulesFamiliesLeaveOutTheTCFamily: with the tc programs on, the
// families they serve, both, run no nftables half; without them every
// family does.
func TestRulesFamiliesLeaveOutTheTCFamily(t *testing.T) {
	both := []proxy.IPFamily{proxy.IPv4, proxy.IPv6}
	for _, tc := range []struct {
		ifaces []string
		want   []proxy.IPFamily
	}{
		{nil, both},
		{[]string{"eth0"}, nil},
	} {
		got := rulesFamilies(Env{Config: &config.Config{BPFTCInterfaces: tc.ifaces}, Families: both})
		if !slices.Equal(got, tc.want) {
			t.Errorf("tc interfaces %v: nftables halves for %v, want %v", tc.ifaces, got, tc.want)
		}
	}
}

// TestRetireOldOnceItWorked: the old path's removal runs after a sync
// that succeeded, again after a failed removal, and never after it worked.
func TestRetireOldOnceItWorked(t *testing.T) {
	calls, fail := 0, true
	b := &hooksAndRules{retire: retirement{what: "test", remove: func(context.Context) error {
		calls++
		if fail {
			return errors.New("busy")
		}
		return nil
	}}}
	b.retireOld(context.Background(), proxy.IPv4)
	fail = false
	b.retireOld(context.Background(), proxy.IPv4)
	b.retireOld(context.Background(), proxy.IPv4)
	if calls != 2 {
		t.Errorf("removal ran %d times, want 2 (a failure, then the success, then never)", calls)
	}
}

// TestTCRetirementWaitsForEveryFamily: a start without the tc programs
// drains them only once every family's nftables half has synced: they
// serve both families, and a family whose rules are not programmed yet
// would otherwise be left with neither path.
func TestTCRetirementWaitsForEveryFamily(t *testing.T) {
	pinDir := t.TempDir()
	if err := os.Mkdir(tcPinDir(pinDir), 0o755); err != nil {
		t.Fatal(err)
	}
	inst := &Instance{}
	r := tcRetirementOf(inst, nil, pinDir, []proxy.IPFamily{proxy.IPv4, proxy.IPv6})
	defer inst.Close()
	ctx := context.Background()
	if err := r.synced(ctx, proxy.IPv4); err != nil || r.done != nil {
		t.Fatalf("after IPv4's first sync alone: err %v, drain begun %t; want it waiting for IPv6", err, r.done != nil)
	}
	if err := r.synced(ctx, proxy.IPv6); err != nil || r.done == nil {
		t.Errorf("after both families' first syncs: err %v, drain begun %t; want begun", err, r.done != nil)
	}
}
