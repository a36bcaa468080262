//go:build benche2e

package bench

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"path/filepath"
	"sort"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	F "github.com/svcproxy/svcproxy/test/e2e/framework"
)

// churnWorkers write the updates: one writer cannot keep 100 round trips
// a second on a loaded machine.
const churnWorkers = 8

// churnResult is the network programming latency of the churn, from the
// kernel (nft monitor: API write → the new endpoint address in a kernel
// change) and from svcproxy's own histogram (delta over the churn, bucket
// bounds, interpolated and the exact mean), and the proxy's CPU time.
type churnResult struct {
	Sent, Errors, Observed int
	Seconds                float64 // sending
	Rate                   float64 // updates per second actually sent
	CPUSeconds             float64 // proxy + waited-for children, send start → all observed
	P50Bound, P99Bound     float64
	P50Interp, P99Interp   float64
	Mean                   float64
	Buckets                string
	// From the kernel observer: nearest-rank quantiles over KernelN
	// changes; KernelMissing were never seen in a kernel change.
	KernelN, KernelMissing          int
	KernelP50, KernelP99, KernelMax float64
	// MapN, MapP50, MapP99 and MapMean (ebpf mode; -1 in the others):
	// API write → the hooks' maps holding the change, from svcproxy's
	// svcproxy_connect_time_programming_duration_seconds over the churn
	// (interpolated in millisecond buckets; the mean is exact). In ebpf
	// mode the kernel observer above sees the nftables half, which writes
	// an element only for what the rules hold.
	MapN                    int
	MapP50, MapP99, MapMean float64
	MapBuckets              string
	// Stages: where the time goes before and inside the proxy.
	Stages stageResult
}

// runChurn updates distinct Services' slices at flagRate per second, each
// moving one endpoint to a new address and stamping the trigger-time
// annotation as the EndpointSlice controller would, then waits until the
// proxy has observed every change.
func runChurn(t *testing.T, c *F.Cluster, n *F.Node) churnResult {
	cs, err := fastClient(c.AdminConfig)
	if err != nil {
		t.Fatal(err)
	}
	slices := listSlices(t, cs)
	order := rand.Perm(*flagServices)[:min(*flagChanges, *flagServices)]
	watched := make([]netip.Addr, len(order))
	for k := range order {
		watched[k] = netip.MustParseAddr(addrAt(churnBase(), k))
	}
	obs, stop := observe(t, c, n, "kernel-changes-churn.txt", watched)
	defer stop()
	s0 := scrape(t, c, n)
	before, mapBefore := s0.histogram(metricProgramming), s0.histogram(metricConnectProgramming)
	syncsBefore := s0.histogram(metricPartialSync)
	delivery := watchDelivery(t, cs)
	logAt := logSize(proxyLog(c, n))
	cpu0 := cpuSeconds(n.Proxy.Pid())
	if *flagProfile {
		secs := int(float64(len(order)) / *flagRate) + 2
		defer saveCPUProfile(t, c, n, filepath.Join(c.Work, "cpu-churn.pprof"), secs)()
	}
	var res churnResult
	t0 := time.Now()
	triggers, answered, errs := sendChurn(cs, slices, order, t.Logf)
	res.Seconds = time.Since(t0).Seconds()
	res.Errors = errs
	res.Sent = len(order) - errs
	res.Rate = float64(res.Sent) / res.Seconds
	after := waitObserved(t, c, n, before, res.Sent)
	res.CPUSeconds = cpuSeconds(n.Proxy.Pid()) - cpu0
	time.Sleep(500 * time.Millisecond) // the last kernel lines
	kernelStats(&res, obs, order, triggers)
	d := after.minus(before)
	res.Observed = int(d.count)
	res.P50Bound, res.P99Bound = none(d.upperBound(0.5)), none(d.upperBound(0.99))
	res.P50Interp, res.P99Interp = none(d.interpolated(0.5)), none(d.interpolated(0.99))
	res.Mean, res.Buckets = none(d.mean()), d.bucketCounts()
	s1 := scrape(t, c, n)
	mapStats(&res, s1.histogram(metricConnectProgramming).minus(mapBefore), c.Opts.Mode)
	res.Stages = stageStats(order, triggers, answered, delivery.finish(), s1.histogram(metricPartialSync).minus(syncsBefore))
	t.Logf("churn: %d updates in %.1f s (%.0f/s, %d errors), %d observed; kernel p50 %.1f p99 %.1f max %.1f ms (%d missing); histogram mean %.0f ms; proxy CPU %.2f s",
		res.Sent, res.Seconds, res.Rate, res.Errors, res.Observed, res.KernelP50*1000, res.KernelP99*1000,
		res.KernelMax*1000, res.KernelMissing, res.Mean*1000, res.CPUSeconds)
	st := res.Stages
	t.Logf("churn stages: API write answered p50 %.1f p99 %.1f ms; watch delivery (%d seen) p50 %.1f p99 %.1f ms; %d partial syncs p50 %.1f mean %.1f ms",
		st.WriteP50*1000, st.WriteP99*1000, st.DeliveryN, st.DeliveryP50*1000, st.DeliveryP99*1000, st.SyncN, st.SyncP50*1000, st.SyncMean*1000)
	if stages, syncs, err := proxyStages(proxyLog(c, n), logAt); err != nil {
		t.Logf("churn: reading the proxy's stages: %v", err)
	} else if stages != nil {
		res.Stages.Proxy, res.Stages.ProxySyncs = stages, syncs
		t.Logf("churn: the proxy's own stages over %d partial syncs, p50/p99 ms: %s", syncs, formatStages(stages))
	}
	if res.MapN >= 0 {
		t.Logf("churn at the hooks' maps: %d observed; p50 %.1f p99 %.1f mean %.1f ms; %s",
			res.MapN, res.MapP50*1000, res.MapP99*1000, res.MapMean*1000, res.MapBuckets)
	}
	return res
}

// mapStats fills, in ebpf mode, the churn's latency at the hooks' maps
// from d, the connect-time histogram's observations over the churn.
func mapStats(res *churnResult, d hist, mode string) {
	res.MapN, res.MapP50, res.MapP99, res.MapMean = -1, -1, -1, -1
	if mode != "ebpf" {
		return
	}
	res.MapN = int(d.count)
	res.MapP50, res.MapP99 = none(d.interpolated(0.5)), none(d.interpolated(0.99))
	res.MapMean, res.MapBuckets = none(d.mean()), d.bucketCounts()
}

// listSlices reads every bench slice once, so that each update is one
// round trip (every Service is updated at most once: the listed
// resourceVersion is still current).
func listSlices(t *testing.T, cs kubernetes.Interface) map[string]*discoveryv1.EndpointSlice {
	ctx, cancel := context.WithTimeout(context.Background(), listAllTimeout)
	defer cancel()
	list, err := cs.DiscoveryV1().EndpointSlices(F.Namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatalf("listing slices: %v", err)
	}
	out := make(map[string]*discoveryv1.EndpointSlice, len(list.Items))
	for i := range list.Items {
		out[list.Items[i].Name] = &list.Items[i]
	}
	return out
}

// sendChurn sends update k (Service order[k]) at t0 + k/rate through
// churnWorkers writers and returns each update's trigger time (zero when
// it failed), when its answer came, and the number of failures.
func sendChurn(cs kubernetes.Interface, slices map[string]*discoveryv1.EndpointSlice, order []int, logf func(string, ...any)) ([]time.Time, []time.Time, int) {
	triggers := make([]time.Time, len(order))
	answered := make([]time.Time, len(order))
	jobs := make(chan int)
	var mu sync.Mutex
	errs := 0
	var wg sync.WaitGroup
	for w := 0; w < churnWorkers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := range jobs {
				trigger, err := moveEndpoint(cs, slices[sliceName(order[k])], k)
				at := time.Now()
				mu.Lock()
				if err != nil {
					errs++
					logf("churn update %d: %v", k, err)
				} else {
					triggers[k], answered[k] = trigger, at
				}
				mu.Unlock()
			}
		}()
	}
	t0 := time.Now()
	interval := time.Duration(float64(time.Second) / *flagRate)
	for k := range order {
		time.Sleep(time.Until(t0.Add(time.Duration(k) * interval)))
		jobs <- k
	}
	close(jobs)
	wg.Wait()
	return triggers, answered, errs
}

// moveEndpoint replaces endpoint k%len of slice s with a fresh address
// and returns the trigger time it wrote, taken just before the write.
func moveEndpoint(cs kubernetes.Interface, s *discoveryv1.EndpointSlice, k int) (time.Time, error) {
	if s == nil {
		return time.Time{}, fmt.Errorf("update %d: slice not listed", k)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	s = s.DeepCopy()
	s.Endpoints[k%len(s.Endpoints)].Addresses = []string{addrAt(churnBase(), k)}
	if s.Annotations == nil {
		s.Annotations = map[string]string{}
	}
	trigger := time.Now()
	s.Annotations[corev1.EndpointsLastChangeTriggerTime] = trigger.UTC().Format(time.RFC3339Nano)
	if _, err := cs.DiscoveryV1().EndpointSlices(F.Namespace).Update(ctx, s, metav1.UpdateOptions{}); err != nil {
		return time.Time{}, fmt.Errorf("update %s: %w", s.Name, err)
	}
	return trigger, nil
}

// kernelStats fills the kernel-observed latency of every sent update.
func kernelStats(res *churnResult, obs *kernelObserver, order []int, triggers []time.Time) {
	var lat []float64
	for k := range order {
		if triggers[k].IsZero() {
			continue
		}
		seen, ok := obs.seen(netip.MustParseAddr(addrAt(churnBase(), k)))
		if !ok {
			res.KernelMissing++
			continue
		}
		lat = append(lat, seen.Sub(triggers[k]).Seconds())
	}
	sort.Float64s(lat)
	res.KernelN = len(lat)
	res.KernelP50, res.KernelP99 = none(quantile(lat, 0.5)), none(quantile(lat, 0.99))
	res.KernelMax = none(quantile(lat, 1))
}
