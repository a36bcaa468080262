//go:build benche2e

package bench

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	F "github.com/svcproxy/svcproxy/test/e2e/framework"
)

// quietPeriod is how long svcproxy must have made no sync before the
// kernel is dumped: with minSyncPeriod ≤ 1 s, an event that reached
// svcproxy after its last sync starts another one well within it.
const quietPeriod = 5 * time.Second

// waitProgrammed finds when every Service was programmed: once svcproxy is
// quiet, it dumps the node's rules and counts the API's ClusterIPs in
// them. When no sync ran during the dump, the dump shows the state of the
// last sync, whose end svcproxy stamped; a sync during the dump makes it
// start over. The first sync is not taken on trust: svcproxy may run it
// before its event handlers have received every listed object.
func waitProgrammed(t *testing.T, c *F.Cluster, n *F.Node, start time.Time, res *runResult) {
	want := clusterIPs(t, c)
	res.WantIPs = len(want)
	for attempt := 1; attempt <= 5; attempt++ {
		before := waitQuiet(t, c, n)
		// As long as a start may take: nft lists 100k × 10 elements in
		// minutes on a loaded machine.
		ctx, cancel := context.WithTimeout(context.Background(), *flagStartTimeout)
		t0 := time.Now()
		dump, err := dumpRules(ctx, c.Opts.Mode, n)
		cancel()
		if err != nil {
			t.Fatalf("dumping the rules: %v", err)
		}
		res.KernelDumpSecs = time.Since(t0).Seconds()
		inMaps := dumpMaps(t, c, n, want)
		after := scrape(t, c, n)
		if after.ipv4Value(metricSyncs) != before.ipv4Value(metricSyncs) {
			t.Logf("a sync ran during the kernel dump; dumping again")
			continue
		}
		found := foundIPs(dump, want)
		res.KernelIPs, res.SyncsToAll = len(found), before.ipv4Value(metricSyncs)
		t.Logf("kernel check: %d/%d ClusterIPs in the rules after %g syncs (dump %.1f s)",
			res.KernelIPs, res.WantIPs, res.SyncsToAll, res.KernelDumpSecs)
		if mapsLive(res, inMaps, before, start); res.MapIPs >= 0 {
			t.Logf("map check: %d/%d ClusterIPs in the hooks' services map; every one %.2f s after start (-1: not every one)",
				res.MapIPs, res.WantIPs, res.MapLive)
		}
		if res.KernelIPs == res.WantIPs && res.WantIPs == *flagServices+1 {
			res.AllProgrammed = before.ipv4Value(metricLastSync) - float64(start.UnixNano())/1e9
			return
		}
		res.AllProgrammed = -1
		path := filepath.Join(c.Work, "kernel-dump.txt")
		_ = os.WriteFile(path, []byte(dump), 0o644)
		t.Errorf("kernel holds %d of %d ClusterIPs (want %d Services + kubernetes) with svcproxy idle; missing e.g. %v; dump in %s",
			res.KernelIPs, res.WantIPs, *flagServices, someMissing(want, found, 5), path)
		return
	}
	t.Fatalf("svcproxy kept syncing during every kernel dump")
}

// dumpMaps is, in ebpf mode, the wanted ClusterIPs found in the hooks'
// services map (nil in the other modes).
func dumpMaps(t *testing.T, c *F.Cluster, n *F.Node, want map[string]bool) map[string]bool {
	if c.Opts.Mode != "ebpf" {
		return nil
	}
	found, err := mapClusterIPs(c.EBPFPinDir(n), want)
	if err != nil {
		t.Fatalf("reading the hooks' maps: %v", err)
	}
	return found
}

// mapsLive records, in ebpf mode, how many ClusterIPs the hooks' maps held
// and, when every one, since when: the end of the last sync's hooks half,
// svcproxy's own stamp. That is when a connect from the node's cgroup to
// any ClusterIP was translated, while the nftables half of the same sync
// may still have been programming (AllProgrammed waits for both).
func mapsLive(res *runResult, inMaps map[string]bool, quiet samples, start time.Time) {
	res.MapIPs, res.MapLive = -1, -1
	if inMaps == nil {
		return
	}
	res.MapIPs = len(inMaps)
	if res.MapIPs == res.WantIPs {
		res.MapLive = quiet.ipv4Value(metricConnectTime) - float64(start.UnixNano())/1e9
	}
}

// waitQuiet polls /metrics until the sync count has not moved for
// quietPeriod and returns the last scrape.
func waitQuiet(t *testing.T, c *F.Cluster, n *F.Node) samples {
	deadline := time.Now().Add(*flagStartTimeout)
	last := scrape(t, c, n)
	since := time.Now()
	for time.Since(since) < quietPeriod {
		if time.Now().After(deadline) {
			t.Fatalf("svcproxy did not stop syncing within %v", *flagStartTimeout)
		}
		time.Sleep(200 * time.Millisecond)
		cur := scrape(t, c, n)
		if cur.ipv4Value(metricSyncs) != last.ipv4Value(metricSyncs) {
			since = time.Now()
		}
		last = cur
	}
	return last
}

func scrape(t *testing.T, c *F.Cluster, n *F.Node) samples {
	text, err := plainMetrics(c, n)
	if err != nil {
		t.Fatalf("scraping /metrics: %v", err)
	}
	return parseMetrics(text)
}

// clusterIPs lists every Service's ClusterIP from the API.
func clusterIPs(t *testing.T, c *F.Cluster) map[string]bool {
	ctx, cancel := context.WithTimeout(context.Background(), listAllTimeout)
	defer cancel()
	list, err := mustFastClient(t, c).CoreV1().Services("").List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatalf("listing Services: %v", err)
	}
	want := map[string]bool{}
	for _, s := range list.Items {
		want[s.Spec.ClusterIP] = true
	}
	return want
}

var ipv4RE = regexp.MustCompile(`\b\d{1,3}\.\d{1,3}\.\d{1,3}\.\d{1,3}\b`)

// foundIPs are the wanted addresses that occur in the dump, in whatever
// form the layout holds them (set elements, map keys, rule matches).
func foundIPs(dump string, want map[string]bool) map[string]bool {
	found := map[string]bool{}
	for _, ip := range ipv4RE.FindAllString(dump, -1) {
		if want[ip] {
			found[ip] = true
		}
	}
	return found
}

func someMissing(want, found map[string]bool, n int) []string {
	var out []string
	for ip := range want {
		if !found[ip] && len(out) < n {
			out = append(out, ip)
		}
	}
	return out
}

// dumpRules is the kernel's view: svcproxy's nftables table (ebpf mode's
// packet path too), or the nat table of both iptables flavours (whichever
// svcproxy picked).
func dumpRules(ctx context.Context, mode string, n *F.Node) (string, error) {
	if F.UsesNFTables(mode) {
		out, err := F.InNS(ctx, n.NS, "nft", "list", "table", "ip", "kube-proxy")
		return string(out), err
	}
	var b strings.Builder
	for _, tool := range []string{"iptables-nft-save", "iptables-legacy-save"} {
		out, err := F.InNS(ctx, n.NS, tool, "-t", "nat")
		if err != nil {
			return "", err
		}
		b.Write(out)
	}
	return b.String(), nil
}
