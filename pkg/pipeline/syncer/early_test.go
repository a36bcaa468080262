package syncer

import (
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/svcproxy/svcproxy/pkg/pipeline/metrics"
)

// fakeEarly reports the time it is set to.
type fakeEarly struct{ at time.Time }

func (e *fakeEarly) ServedAt() time.Time { return e.at }

// TestEarlyServerTimedApart: a backend whose early part served before the
// sync ended gets that part's own timestamp and latency, from the change's
// trigger time to the moment the part held it; health and the whole sync's
// metrics keep the end of the sync. A failed sync, or one whose early part
// reports no time, changes neither.
func TestEarlyServerTimedApart(t *testing.T) {
	f := newFixture(t, metrics.NFTablesSyncFailuresTotal)
	early := &fakeEarly{}
	f.syncer.o.Proxier.EarlyServer = early
	f.markSynced()
	trigger := f.clock.Now()
	stamp := metrics.EarlyServedLastTimestamp.WithLabelValues("IPv4")
	lat := metrics.EarlyProgrammingLatency.WithLabelValues("IPv4")
	n0, sum0 := histogramCount(t, lat), read(t, lat).GetHistogram().GetSampleSum()

	f.tracker.OnServiceUpdate(nil, webService(nil))
	f.tracker.OnEndpointSliceUpdate(nil, webSlice(trigger, "10.0.1.1"))
	early.at = trigger.Add(3 * time.Millisecond)
	f.clock.Step(2 * time.Second)
	f.mustSync()
	if got := gaugeValue(t, stamp); got != unixSeconds(early.at) {
		t.Errorf("connect-time timestamp = %v, want the early part's %v", got, unixSeconds(early.at))
	}
	if got := gaugeValue(t, metrics.SyncProxyRulesLastTimestamp.WithLabelValues("IPv4")); got != unixSeconds(f.clock.Now()) {
		t.Errorf("last_timestamp = %v, want the end of the sync %v", got, unixSeconds(f.clock.Now()))
	}
	sum := read(t, lat).GetHistogram().GetSampleSum() - sum0
	if got := histogramCount(t, lat) - n0; got != 1 || math.Abs(sum-0.003) > 1e-9 {
		t.Errorf("connect-time latency: +%d observations summing %v s, want 1 of 0.003 s", got, sum)
	}
	if f.health.updated != 1 {
		t.Errorf("health updated %d times, want once, after the whole sync", f.health.updated)
	}

	f.tracker.OnEndpointSliceUpdate(webSlice(trigger, "10.0.1.1"), webSlice(trigger.Add(time.Second), "10.0.1.2"))
	f.proxier.setFail(errors.New("rules rejected"))
	early.at = f.clock.Now()
	if err := f.syncer.syncOnce(); err == nil {
		t.Fatal("sync succeeded, want the injected failure")
	}
	f.proxier.setFail(nil)
	early.at = time.Time{}
	f.mustSync()
	if got := gaugeValue(t, stamp); got != unixSeconds(trigger.Add(3*time.Millisecond)) {
		t.Errorf("connect-time timestamp = %v after a failed sync and one without a time, want the first sync's", got)
	}
	if got := histogramCount(t, lat) - n0; got != 1 {
		t.Errorf("connect-time latency observed %d times, want only the first sync's", got)
	}
}

// TestFirstSyncLogsTheEarlyPart: the first sync's log line says when the
// early part was done, beside the whole sync's elapsed time.
func TestFirstSyncLogsTheEarlyPart(t *testing.T) {
	logged := firstSyncLines(t)
	f := newFixture(t, metrics.NFTablesSyncFailuresTotal)
	f.syncer.o.Proxier.EarlyServer = &fakeEarly{at: f.clock.Now().Add(250 * time.Millisecond)}
	f.markSynced()
	f.tracker.OnServiceUpdate(nil, webService(nil))
	f.mustSync()
	if first := logged(); len(first) != 1 || !strings.Contains(first[0], `"connectTimeElapsed"="250ms"`) {
		t.Errorf("first-sync lines %q, want one with connectTimeElapsed 250ms", first)
	}
}

// TestProgrammingLatencyNotExposedUntilObserved: a sync without an
// EndpointSlice trigger time makes no child of the latency histograms, so
// that /metrics shows them only once observed, as upstream does (the
// differential suite compares the families).
func TestProgrammingLatencyNotExposedUntilObserved(t *testing.T) {
	metrics.NetworkProgrammingLatency.Reset()
	metrics.EarlyProgrammingLatency.Reset()
	f := newFixture(t, metrics.NFTablesSyncFailuresTotal)
	f.syncer.o.Proxier.EarlyServer = &fakeEarly{at: f.clock.Now()}
	f.markSynced()
	f.tracker.OnServiceUpdate(nil, webService(nil))
	f.mustSync()
	for name, h := range map[string]*prometheus.HistogramVec{
		"network programming": metrics.NetworkProgrammingLatency, "connect-time": metrics.EarlyProgrammingLatency,
	} {
		series := make(chan prometheus.Metric, 8)
		h.Collect(series)
		if n := len(series); n != 0 {
			t.Errorf("%s latency: %d series after a sync without trigger times, want none", name, n)
		}
	}
}
