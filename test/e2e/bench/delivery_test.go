//go:build benche2e

package bench

import (
	"context"
	"errors"
	"sort"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"

	F "github.com/svcproxy/svcproxy/test/e2e/framework"
)

// metricPartialSync is the duration of each successful partial sync:
// commit, compute and the backend's work, without the wait before it.
const metricPartialSync = "kubeproxy_sync_partial_proxy_rules_duration_seconds"

// stageResult splits the churn's latency by where it is spent, as far as
// the harness sees it from outside the proxy: the API write's round trip
// (trigger → the update's answer), the API server's watch delivery
// (trigger → a watch of the harness's own receiving the update: what the
// trigger-time reference itself costs before any proxy sees the change),
// and the proxy's partial syncs (commit → backend done, from its own
// histogram, which iptables and nftables modes export, as upstream's:
// millisecond buckets doubling, interpolated; the mean exact).
// Quantiles are nearest-rank over the changes; -1 when none.
type stageResult struct {
	WriteP50, WriteP99       float64
	DeliveryP50, DeliveryP99 float64
	DeliveryN                int
	SyncN                    int
	SyncP50, SyncMean        float64
	// Proxy: the stages svcproxy logs per partial sync at -v=4
	// (stageslog_test.go), over ProxySyncs syncs; nil at another
	// verbosity.
	Proxy      map[string]stageQuantiles `json:",omitempty"`
	ProxySyncs int
}

// deliveryWatch records when each EndpointSlice's first update after its
// start reaches a watch of the harness (its own client, like the proxy's
// an HTTP/2 stream from the API server).
type deliveryWatch struct {
	mu   sync.Mutex
	seen map[string]time.Time
	stop context.CancelFunc
	done chan struct{}
}

// watchDelivery starts the watch at the slices' current resourceVersion.
func watchDelivery(t *testing.T, cs kubernetes.Interface) *deliveryWatch {
	ctx, cancel := context.WithCancel(context.Background())
	list, err := cs.DiscoveryV1().EndpointSlices(F.Namespace).List(ctx, metav1.ListOptions{Limit: 1})
	if err != nil {
		cancel()
		t.Fatalf("delivery watch: listing: %v", err)
	}
	w, err := cs.DiscoveryV1().EndpointSlices(F.Namespace).Watch(ctx, metav1.ListOptions{ResourceVersion: list.ResourceVersion})
	if err != nil {
		cancel()
		t.Fatalf("delivery watch: %v", err)
	}
	d := &deliveryWatch{seen: map[string]time.Time{}, stop: cancel, done: make(chan struct{})}
	go func() {
		defer close(d.done)
		defer w.Stop()
		for ev := range w.ResultChan() {
			now := time.Now()
			if ev.Type != watch.Modified {
				continue
			}
			if m, err := metaOf(ev.Object); err == nil {
				d.mu.Lock()
				if _, ok := d.seen[m]; !ok {
					d.seen[m] = now
				}
				d.mu.Unlock()
			}
		}
	}()
	return d
}

func metaOf(obj any) (string, error) {
	o, ok := obj.(metav1.Object)
	if !ok {
		return "", errors.New("not a metav1.Object")
	}
	return o.GetName(), nil
}

// finish stops the watch and returns what it saw.
func (d *deliveryWatch) finish() map[string]time.Time {
	d.stop()
	<-d.done
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.seen
}

// stageStats fills res from the updates' trigger and answer times, the
// delivery watch and the partial-sync histogram's observations over the
// churn.
func stageStats(order []int, triggers, answered []time.Time, seen map[string]time.Time, syncs hist) stageResult {
	var write, delivery []float64
	for k, svc := range order {
		if triggers[k].IsZero() {
			continue
		}
		write = append(write, answered[k].Sub(triggers[k]).Seconds())
		if at, ok := seen[sliceName(svc)]; ok {
			delivery = append(delivery, at.Sub(triggers[k]).Seconds())
		}
	}
	sort.Float64s(write)
	sort.Float64s(delivery)
	return stageResult{
		WriteP50: none(quantile(write, 0.5)), WriteP99: none(quantile(write, 0.99)),
		DeliveryP50: none(quantile(delivery, 0.5)), DeliveryP99: none(quantile(delivery, 0.99)),
		DeliveryN: len(delivery),
		SyncN:     int(syncs.count), SyncP50: none(syncs.interpolated(0.5)), SyncMean: none(syncs.mean()),
	}
}
