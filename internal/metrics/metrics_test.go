package metrics

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	proxymetrics "github.com/svcproxy/svcproxy/pkg/pipeline/metrics"
	"github.com/svcproxy/svcproxy/pkg/proxy"
)

// want is one row of the contract's table (§3.2), written out independently
// of the production definitions.
type want struct {
	name    string
	typ     dto.MetricType
	help    string
	labels  []string // sorted
	buckets []float64
	modes   []proxy.Mode // nil: every mode
}

var (
	expBuckets = []float64{0.001, 0.002, 0.004, 0.008, 0.016, 0.032, 0.064, 0.128, 0.256, 0.512,
		1.024, 2.048, 4.096, 8.192, 16.384}
	allModes = []proxy.Mode{proxy.ModeIPTables, proxy.ModeNFTables, proxy.ModeIPVS}
)

func npdBuckets() []float64 {
	b := []float64{0, 0.25, 0.5}
	for s := 1; s <= 59; s++ {
		b = append(b, float64(s))
	}
	for s := 60; s <= 115; s += 5 {
		b = append(b, float64(s))
	}
	for s := 120; s <= 300; s += 30 {
		b = append(b, float64(s))
	}
	return b
}

var (
	hist     = dto.MetricType_HISTOGRAM
	gaugeT   = dto.MetricType_GAUGE
	counterT = dto.MetricType_COUNTER
	fam      = []string{"ip_family"}
)

var contractTable = []want{
	{"kubeproxy_sync_proxy_rules_duration_seconds", hist, "SyncProxyRules latency in seconds", fam, expBuckets, nil},
	{"kubeproxy_sync_full_proxy_rules_duration_seconds", hist, "SyncProxyRules latency in seconds for full resyncs", fam, expBuckets, []proxy.Mode{"iptables", "nftables"}},
	{"kubeproxy_sync_partial_proxy_rules_duration_seconds", hist, "SyncProxyRules latency in seconds for partial resyncs", fam, expBuckets, []proxy.Mode{"iptables", "nftables"}},
	{"kubeproxy_sync_proxy_rules_last_timestamp_seconds", gaugeT, "The last time proxy rules were successfully synced", fam, nil, nil},
	{"kubeproxy_sync_proxy_rules_last_queued_timestamp_seconds", gaugeT, "The last time a sync of proxy rules was queued", fam, nil, nil},
	{"kubeproxy_network_programming_duration_seconds", hist, "In Cluster Network Programming Latency in seconds", fam, npdBuckets(), nil},
	{"kubeproxy_sync_proxy_rules_endpoint_changes_pending", gaugeT, "Pending proxy rules Endpoint changes", nil, nil, nil},
	{"kubeproxy_sync_proxy_rules_endpoint_changes_total", counterT, "Cumulative proxy rules Endpoint changes", nil, nil, nil},
	{"kubeproxy_sync_proxy_rules_service_changes_pending", gaugeT, "Pending proxy rules Service changes", nil, nil, nil},
	{"kubeproxy_sync_proxy_rules_service_changes_total", counterT, "Cumulative proxy rules Service changes", nil, nil, nil},
	{"kubeproxy_sync_proxy_rules_no_local_endpoints_total", gaugeT, "Number of services with a Local traffic policy and no endpoints", []string{"ip_family", "traffic_policy"}, nil, nil},
	{"kubeproxy_sync_proxy_rules_iptables_restore_failures_total", counterT, "Cumulative proxy iptables restore failures", fam, nil, []proxy.Mode{"iptables", "ipvs"}},
	{"kubeproxy_sync_proxy_rules_iptables_partial_restore_failures_total", counterT, "Cumulative proxy iptables partial restore failures", fam, nil, []proxy.Mode{"iptables"}},
	{"kubeproxy_sync_proxy_rules_iptables_total", gaugeT, "Total number of iptables rules owned by kube-proxy", []string{"ip_family", "table"}, nil, []proxy.Mode{"iptables"}},
	{"kubeproxy_sync_proxy_rules_iptables_last", gaugeT, "Number of iptables rules written by kube-proxy in last sync", []string{"ip_family", "table"}, nil, []proxy.Mode{"iptables"}},
	{"kubeproxy_sync_proxy_rules_nftables_sync_failures_total", counterT, "Cumulative proxy nftables sync failures", fam, nil, []proxy.Mode{"nftables"}},
	{"kubeproxy_sync_proxy_rules_nftables_cleanup_failures_total", counterT, "Cumulative proxy nftables cleanup failures", fam, nil, []proxy.Mode{"nftables"}},
	{"kubeproxy_iptables_ct_state_invalid_dropped_packets_total", counterT, "packets dropped by iptables to work around conntrack problems", nil, nil, []proxy.Mode{"iptables"}},
	{"kubeproxy_iptables_localhost_nodeports_accepted_packets_total", counterT, "Number of packets accepted on nodeports of loopback interface", nil, nil, []proxy.Mode{"iptables"}},
	{"kubeproxy_conntrack_reconciler_sync_duration_seconds", hist, "ReconcileConntrackFlowsLatency latency in seconds", fam, expBuckets, nil},
	{"kubeproxy_conntrack_reconciler_deleted_entries_total", counterT, "Cumulative conntrack flows deleted by conntrack reconciler", fam, nil, nil},
	{"kubeproxy_proxy_healthz_total", counterT, "Cumulative proxy healthz HTTP status", []string{"code"}, nil, nil},
	{"kubeproxy_proxy_livez_total", counterT, "Cumulative proxy livez HTTP status", []string{"code"}, nil, nil},
}

type fakeNFAcct map[string]uint64

func (f fakeNFAcct) Get(name string) (uint64, error) {
	if n, ok := f[name]; ok {
		return n, nil
	}
	return 0, errors.New("no such counter")
}

var sampleLabel = map[string]string{
	LabelIPFamily: "IPv4", LabelTrafficPolicy: proxymetrics.TrafficPolicyInternal, LabelTable: "nat", LabelCode: "200",
}

// touchAll creates one child of every vector so that Gather reports it:
// an unused vector has no samples and no family in the output.
func touchAll(t *testing.T) {
	t.Helper()
	for _, f := range families {
		vals := make([]string, len(f.labels))
		for i, l := range f.labels {
			vals[i] = sampleLabel[l]
		}
		var err error
		switch c := f.collector.(type) {
		case *prometheus.HistogramVec:
			_, err = c.GetMetricWithLabelValues(vals...)
		case *prometheus.CounterVec:
			_, err = c.GetMetricWithLabelValues(vals...)
		case *prometheus.GaugeVec:
			_, err = c.GetMetricWithLabelValues(vals...)
		}
		if err != nil {
			t.Fatalf("touch %v: %v", f.labels, err)
		}
	}
}

func gather(t *testing.T, mode proxy.Mode) map[string]*dto.MetricFamily {
	t.Helper()
	nf := fakeNFAcct{proxymetrics.NFAcctCTStateInvalidDropped: 7, proxymetrics.NFAcctLocalhostNodePortAccepted: 3}
	return gatherWith(t, mode, func() { touchAll(t) }, WithNFAcct(nf))
}

// gatherWith registers mode's families with opts, runs touch, and gathers
// them by name.
func gatherWith(t *testing.T, mode proxy.Mode, touch func(), opts ...Option) map[string]*dto.MetricFamily {
	t.Helper()
	reg := prometheus.NewRegistry()
	if err := Register(reg, mode, opts...); err != nil {
		t.Fatalf("Register(%s): %v", mode, err)
	}
	touch()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatalf("Gather: %v", err)
	}
	out := map[string]*dto.MetricFamily{}
	for _, mf := range mfs {
		out[mf.GetName()] = mf
	}
	return out
}

func TestFamiliesPerModeMatchContract(t *testing.T) {
	for _, mode := range allModes {
		t.Run(string(mode), func(t *testing.T) {
			got := gather(t, mode)
			for name := range got {
				if strings.HasPrefix(name, "kubeproxy_") && !expectedIn(name, mode) {
					t.Errorf("%s registered in %s mode, contract says not", name, mode)
				}
			}
			for _, w := range contractTable {
				if w.modes != nil && !slices.Contains(w.modes, mode) {
					continue
				}
				mf, ok := got[w.name]
				if !ok {
					t.Errorf("%s missing in %s mode", w.name, mode)
					continue
				}
				checkFamily(t, w, mf)
			}
		})
	}
}

func expectedIn(name string, mode proxy.Mode) bool {
	for _, w := range contractTable {
		if w.name == name {
			return w.modes == nil || slices.Contains(w.modes, mode)
		}
	}
	return false
}

func checkFamily(t *testing.T, w want, mf *dto.MetricFamily) {
	t.Helper()
	if mf.GetType() != w.typ {
		t.Errorf("%s: type %v, want %v", w.name, mf.GetType(), w.typ)
	}
	if mf.GetHelp() != "[ALPHA] "+w.help {
		t.Errorf("%s: help %q, want %q", w.name, mf.GetHelp(), "[ALPHA] "+w.help)
	}
	m := mf.GetMetric()[0]
	var labels []string
	for _, lp := range m.GetLabel() {
		labels = append(labels, lp.GetName())
	}
	slices.Sort(labels)
	if !slices.Equal(labels, w.labels) {
		t.Errorf("%s: labels %v, want %v", w.name, labels, w.labels)
	}
	if w.typ == hist {
		var bounds []float64
		for _, b := range m.GetHistogram().GetBucket() {
			bounds = append(bounds, b.GetUpperBound())
		}
		if !equalFloats(bounds, w.buckets) {
			t.Errorf("%s: buckets %v, want %v", w.name, bounds, w.buckets)
		}
	}
}

func equalFloats(a, b []float64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if d := a[i] - b[i]; d > 1e-9 || d < -1e-9 {
			return false
		}
	}
	return true
}

func TestStandardFamiliesRegistered(t *testing.T) {
	got := gather(t, proxy.ModeNFTables)
	for _, name := range []string{"go_goroutines", "process_start_time_seconds", "kubernetes_build_info"} {
		if _, ok := got[name]; !ok {
			t.Errorf("%s missing", name)
		}
	}
	bi := got["kubernetes_build_info"].GetMetric()[0]
	if bi.GetGauge().GetValue() != 1 {
		t.Errorf("kubernetes_build_info = %v, want 1", bi.GetGauge().GetValue())
	}
	var names []string
	for _, l := range bi.GetLabel() {
		names = append(names, l.GetName())
	}
	wantLabels := []string{"build_date", "compiler", "git_commit", "git_tree_state", "git_version", "go_version", "major", "minor", "platform"}
	if !slices.Equal(names, wantLabels) {
		t.Errorf("kubernetes_build_info labels %v, want %v", names, wantLabels)
	}
}

func TestNFAcctValuesAndUnreadableCounters(t *testing.T) {
	got := gather(t, proxy.ModeIPTables)
	v := got["kubeproxy_iptables_ct_state_invalid_dropped_packets_total"].GetMetric()[0].GetCounter().GetValue()
	if v != 7 {
		t.Errorf("ct_state_invalid counter = %v, want 7", v)
	}

	reg := prometheus.NewRegistry()
	if err := Register(reg, proxy.ModeIPTables, WithNFAcct(fakeNFAcct{})); err != nil {
		t.Fatal(err)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if strings.HasPrefix(mf.GetName(), "kubeproxy_iptables_") {
			t.Errorf("%s reported although its counter cannot be read", mf.GetName())
		}
	}
}

// TestRegisterModeOfItsOwn: a mode upstream does not have gets the
// families every mode has and those WithFamilies names, and none of
// upstream's modes' own.
func TestRegisterModeOfItsOwn(t *testing.T) {
	own := counter("test_sync_failures_total", "test", LabelIPFamily)
	got := gatherWith(t, "test", func() { own.WithLabelValues("IPv4").Inc() }, WithFamilies(own))
	if _, ok := got["kubeproxy_test_sync_failures_total"]; !ok {
		t.Error("the mode's own family is not registered")
	}
	if _, ok := got["kubeproxy_sync_proxy_rules_last_timestamp_seconds"]; !ok {
		t.Error("a family of every mode is not registered")
	}
	for name := range got {
		if strings.Contains(name, "iptables") || strings.Contains(name, "nftables") {
			t.Errorf("%s registered for a mode of its own", name)
		}
	}
}
