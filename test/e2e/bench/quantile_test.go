//go:build benche2e

package bench

import (
	"math"
	"sort"
	"sync"
	"time"

	F "github.com/svcproxy/svcproxy/test/e2e/framework"
)

// syncTrace scrapes svcproxy every 20 ms during the churn and keeps, each
// time the histogram's count moved, the new count and the end of the last
// sync (svcproxy's own stamp). With the trigger time of every update it
// gives each change's latency at millisecond resolution, where the
// histogram's buckets are 250 ms wide: change k is consumed by the first
// sync after which the count reached base+k+1 (updates go one after the
// other, and a sync consumes every change pending). When two syncs end
// within one scrape interval, the earlier one's changes get the later end:
// late by at most one sync.
type syncTrace struct {
	c      *F.Cluster
	n      *F.Node
	stop   chan struct{}
	done   chan struct{}
	mu     sync.Mutex
	points []tracePoint
}

type tracePoint struct {
	count float64 // observations in the histogram so far
	end   float64 // kubeproxy_sync_proxy_rules_last_timestamp_seconds
}

func startTrace(c *F.Cluster, n *F.Node) *syncTrace {
	tr := &syncTrace{c: c, n: n, stop: make(chan struct{}), done: make(chan struct{})}
	go tr.loop()
	return tr
}

func (tr *syncTrace) loop() {
	defer close(tr.done)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	last := math.NaN()
	for {
		select {
		case <-tr.stop:
			return
		case <-tick.C:
		}
		text, err := tr.c.Metrics(tr.n)
		if err != nil {
			continue // a missed scrape only coarsens the trace
		}
		s := parseMetrics(text)
		count := s.histogram(metricProgramming).count
		if count != last {
			tr.mu.Lock()
			tr.points = append(tr.points, tracePoint{count, s.ipv4Value(metricLastSync)})
			tr.mu.Unlock()
			last = count
		}
	}
}

// latencies stops the trace and returns the latency of each change, in
// order, from base (the count before the churn); changes the trace never
// saw consumed are left out.
func (tr *syncTrace) latencies(base float64, triggers []time.Time) []float64 {
	close(tr.stop)
	<-tr.done
	tr.mu.Lock()
	defer tr.mu.Unlock()
	var out []float64
	j := 0
	for k, trig := range triggers {
		for j < len(tr.points) && tr.points[j].count < base+float64(k+1) {
			j++
		}
		if j == len(tr.points) {
			break
		}
		out = append(out, tr.points[j].end-float64(trig.UnixNano())/1e9)
	}
	return out
}

// quantile of sorted values: the nearest rank, no interpolation.
func quantile(sorted []float64, q float64) float64 {
	if len(sorted) == 0 {
		return math.NaN()
	}
	i := int(math.Ceil(q*float64(len(sorted)))) - 1
	return sorted[max(0, min(i, len(sorted)-1))]
}

// traceStats fills the per-change figures of res.
func traceStats(res *churnResult, lat []float64) {
	sort.Float64s(lat)
	res.TraceN = len(lat)
	res.TraceP50, res.TraceP99 = none(quantile(lat, 0.5)), none(quantile(lat, 0.99))
	res.TraceMax = none(quantile(lat, 1))
}
