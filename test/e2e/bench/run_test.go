//go:build benche2e

package bench

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	F "github.com/svcproxy/svcproxy/test/e2e/framework"
)

// runResult is one run of one mode. Times in seconds, sizes in KiB.
type runResult struct {
	Mode        string
	Run         int
	Load1Before float64
	Load1After  float64
	ClusterUp   float64 // namespaces + control plane from the seed + RBAC + Node

	// FirstSync: process start → end of the first successful sync, read
	// from svcproxy's kubeproxy_sync_proxy_rules_last_timestamp_seconds.
	FirstSync float64
	// AllProgrammed: process start → end of the sync after which the
	// kernel holds every ClusterIP the API lists (checked by a dump once
	// svcproxy has been quiet for a while); SyncsToAll: syncs until then.
	// More than one sync means the first one missed Services: nothing else
	// changes in between.
	AllProgrammed  float64
	SyncsToAll     float64
	KernelIPs      int // Service ClusterIPs found in the kernel's rules
	WantIPs        int // ClusterIPs the API lists (the Services + "kubernetes")
	KernelDumpSecs float64

	Churn churnResult

	RSSAfterFirstSync int64 // svcproxy VmHWM right after the first sync
	RSSPeak           int64 // svcproxy VmHWM at the end of the run
	Children          []childPeak
	WaitMaxRSS        int64 // wait4 maxrss: max(svcproxy, largest child)
}

// churnResult is the network programming latency of the churn: the
// delta of the histogram over it, as quantile bucket bounds, Prometheus-
// interpolated quantiles and the exact mean.
type churnResult struct {
	Sent, Errors, Observed int
	Seconds                float64
	P50Bound, P99Bound     float64
	P50Interp, P99Interp   float64
	Mean                   float64
	Buckets                string
	// Per change, from svcproxy's sync end stamps (syncTrace): exact
	// nearest-rank quantiles over TraceN changes.
	TraceN                       int
	TraceP50, TraceP99, TraceMax float64
}

// runOnce builds a one-node cluster from the seed, starts svcproxy and
// measures it; the cluster goes away with t's cleanup.
func runOnce(t *testing.T, mode string, run int, seedDir string) runResult {
	res := runResult{Mode: mode, Run: run, Load1Before: load1()}
	t0 := time.Now()
	c := F.New(t, F.Options{Mode: mode, Nodes: 1, NoProxy: true, SeedDir: seedDir,
		SyncPeriod: *flagSyncPeriod, MinSyncPeriod: *flagMinSync})
	res.ClusterUp = time.Since(t0).Seconds()
	n := c.Nodes[0]
	start := time.Now()
	if err := c.StartProxy(n); err != nil {
		t.Fatal(err)
	}
	mon := startChildMonitor(n.Proxy.Pid())
	defer mon.finish()
	res.FirstSync = waitFirstSync(t, c, n, start)
	_, res.RSSAfterFirstSync, _ = procStatus(n.Proxy.Pid())
	t.Logf("first sync %.2f s after start; svcproxy VmHWM %d MiB", res.FirstSync, res.RSSAfterFirstSync>>10)
	waitProgrammed(t, c, n, start, &res)
	res.Churn = runChurn(t, c, n)
	_, res.RSSPeak, _ = procStatus(n.Proxy.Pid())
	res.Children = mon.finish()
	n.Proxy.Stop(30 * time.Second)
	if ru := n.Proxy.Rusage(); ru != nil {
		res.WaitMaxRSS = ru.Maxrss
	}
	res.Load1After = load1()
	return res
}

// waitFirstSync polls /metrics until svcproxy reports a successful sync
// and returns when that sync ended (svcproxy's own stamp, not when the
// poll saw it). svcproxy syncs first once its informers report synced;
// whether that sync held every Service is waitProgrammed's question.
func waitFirstSync(t *testing.T, c *F.Cluster, n *F.Node, start time.Time) float64 {
	deadline := time.Now().Add(*flagStartTimeout)
	for time.Now().Before(deadline) {
		if text, err := c.Metrics(n); err == nil {
			if ts := parseMetrics(text).ipv4Value(metricLastSync); ts > 0 {
				return ts - float64(start.UnixNano())/1e9
			}
		}
		if !n.Proxy.Alive() {
			t.Fatalf("svcproxy exited before its first sync:\n%s", n.Proxy.Tail(3000))
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("no successful sync within %v:\n%s", *flagStartTimeout, n.Proxy.Tail(3000))
	return 0
}

// runChurn updates distinct Services' slices at flagRate per second, each
// moving one endpoint to a new address and stamping the trigger-time
// annotation as the EndpointSlice controller would, then waits until
// svcproxy has observed every change in the histogram.
func runChurn(t *testing.T, c *F.Cluster, n *F.Node) churnResult {
	before := scrapeHistogram(t, c, n)
	cs, err := fastClient(c.AdminConfig)
	if err != nil {
		t.Fatal(err)
	}
	var res churnResult
	order := rand.Perm(*flagServices)[:min(*flagChanges, *flagServices)]
	tick := time.NewTicker(time.Duration(float64(time.Second) / *flagRate))
	defer tick.Stop()
	trace := startTrace(c, n)
	var triggers []time.Time
	t0 := time.Now()
	for k, i := range order {
		<-tick.C
		trigger, err := moveEndpoint(cs, i, k)
		if err != nil {
			res.Errors++
			t.Logf("churn update %d: %v", k, err)
			continue
		}
		triggers = append(triggers, trigger)
	}
	res.Sent = len(triggers)
	res.Seconds = time.Since(t0).Seconds()
	after := waitObserved(t, c, n, before, res.Sent)
	traceStats(&res, trace.latencies(before.count, triggers))
	d := after.minus(before)
	res.Observed = int(d.count)
	res.P50Bound, res.P99Bound = none(d.upperBound(0.5)), none(d.upperBound(0.99))
	res.P50Interp, res.P99Interp = none(d.interpolated(0.5)), none(d.interpolated(0.99))
	res.Mean, res.Buckets = none(d.mean()), d.bucketCounts()
	t.Logf("churn: %d updates in %.1f s (%d errors), %d observed; mean %.0f ms; buckets %s; per change p50 %.0f p99 %.0f max %.0f ms",
		res.Sent, res.Seconds, res.Errors, res.Observed, res.Mean*1000, res.Buckets,
		res.TraceP50*1000, res.TraceP99*1000, res.TraceMax*1000)
	return res
}

// none turns "no observation" (NaN) into -1: JSON has no NaN, and the
// report prints negative values as "–".
func none(v float64) float64 {
	if math.IsNaN(v) {
		return -1
	}
	return v
}

// moveEndpoint replaces endpoint k%len of Service i's slice with a fresh
// address and returns the trigger time it wrote, taken just before the
// write.
func moveEndpoint(cs kubernetes.Interface, i, k int) (time.Time, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	slices := cs.DiscoveryV1().EndpointSlices(F.Namespace)
	s, err := slices.Get(ctx, sliceName(i), metav1.GetOptions{})
	if err != nil {
		return time.Time{}, fmt.Errorf("get %s: %w", sliceName(i), err)
	}
	s.Endpoints[k%len(s.Endpoints)].Addresses = []string{addrAt(churnBase, k)}
	if s.Annotations == nil {
		s.Annotations = map[string]string{}
	}
	trigger := time.Now()
	s.Annotations[corev1.EndpointsLastChangeTriggerTime] = trigger.UTC().Format(time.RFC3339Nano)
	if _, err := slices.Update(ctx, s, metav1.UpdateOptions{}); err != nil {
		return time.Time{}, fmt.Errorf("update %s: %w", sliceName(i), err)
	}
	return trigger, nil
}

func scrapeHistogram(t *testing.T, c *F.Cluster, n *F.Node) hist {
	return scrape(t, c, n).histogram(metricProgramming)
}

// waitObserved waits up to a minute for want new observations.
func waitObserved(t *testing.T, c *F.Cluster, n *F.Node, before hist, want int) hist {
	deadline := time.Now().Add(time.Minute)
	for {
		h := scrapeHistogram(t, c, n)
		if int(h.count-before.count) >= want || time.Now().After(deadline) {
			return h
		}
		time.Sleep(200 * time.Millisecond)
	}
}
