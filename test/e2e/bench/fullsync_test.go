//go:build benche2e

package bench

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	F "github.com/svcproxy/svcproxy/test/e2e/framework"
)

const metricFullSyncs = "kubeproxy_sync_full_proxy_rules_duration_seconds"

// fullSyncResult is one full sync with nothing changed that the rules
// depend on.
type fullSyncResult struct {
	Seconds float64 // the full sync's own duration (its histogram's sum, delta)
	// KernelChanges, Transactions: nf_tables notifications from the Node
	// write until the proxy was quiet again; none is the target.
	KernelChanges, Transactions int
	// Overflowed: the observer lost notifications; the counts above
	// are lower bounds.
	Overflowed bool
	CPUSeconds float64 // the proxy's, same interval
}

// measureFullSync forces the sync the hourly resync runs, through a path
// both svcproxy and upstream have: a change of the Node's zone label makes
// either do a full sync (upstream: OnTopologyChange sets needFullSync;
// svcproxy: a changed node, syncer.decide). No seeded slice has zone hints,
// so the zone changes nothing in the rules, and the kernel should see no
// change at all. The sync is confirmed by the full-sync histogram's count.
func measureFullSync(t *testing.T, c *F.Cluster, n *F.Node) fullSyncResult {
	before := waitQuiet(t, c, n)
	obs, stop := observe(t, c, n, "kernel-changes-fullsync.txt", nil)
	defer stop()
	cpu0 := cpuSeconds(n.Proxy.Pid())
	setZone(t, c, n, "zone-fullsync")
	series := fullSyncSeries(before)
	full0 := before.ipv4Value(series + "_count")
	deadline := time.Now().Add(*flagStartTimeout)
	for scrape(t, c, n).ipv4Value(series+"_count") == full0 {
		if time.Now().After(deadline) {
			t.Fatalf("no full sync within %v of the zone change", *flagStartTimeout)
		}
		time.Sleep(200 * time.Millisecond)
	}
	after := waitQuiet(t, c, n)
	var res fullSyncResult
	res.KernelChanges, res.Transactions, res.Overflowed = obs.counts()
	res.CPUSeconds = cpuSeconds(n.Proxy.Pid()) - cpu0
	res.Seconds = after.ipv4Value(series+"_sum") - before.ipv4Value(series+"_sum")
	if k := after.ipv4Value(series+"_count") - full0; k != 1 {
		t.Logf("full sync: %g full syncs ran, not 1; the figures cover them all", k)
	}
	t.Logf("full sync: %.2f s; %d kernel changes in %d transactions; proxy CPU %.2f s",
		res.Seconds, res.KernelChanges, res.Transactions, res.CPUSeconds)
	return res
}

// fullSyncSeries is the histogram that counts the full syncs: upstream's
// full-sync one, or, in a mode that does not have it (ebpf), the one of
// every sync (nothing else changes meanwhile, so the one sync is the full
// sync).
func fullSyncSeries(s samples) string {
	if _, ok := s[metricFullSyncs+"_count{"+ipv4+"}"]; ok {
		return metricFullSyncs
	}
	return strings.TrimSuffix(metricSyncs, "_count")
}

// setZone writes n's topology.kubernetes.io/zone label.
func setZone(t *testing.T, c *F.Cluster, n *F.Node, zone string) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	node, err := c.Admin.CoreV1().Nodes().Get(ctx, n.Name, metav1.GetOptions{})
	if err == nil {
		node.Labels[corev1.LabelTopologyZone] = zone
		_, err = c.Admin.CoreV1().Nodes().Update(ctx, node, metav1.UpdateOptions{})
	}
	if err != nil {
		t.Fatalf("changing the zone of %s: %v", n.Name, err)
	}
}
