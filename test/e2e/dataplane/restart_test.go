package dataplane

import (
	"bufio"
	"context"
	"os/exec"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	F "github.com/svcproxy/svcproxy/test/e2e/framework"
)

// steadyGOGC is the Go collector's target once the first sync is
// programmed; gogcLine is that metric's line, whatever its value.
var (
	steadyGOGC = regexp.MustCompile(`(?m)^go_gc_gogc_percent 50$`)
	gogcLine   = regexp.MustCompile(`(?m)^go_gc_gogc_percent .*$`)
)

// syncedFamily matches a family's last-sync stamp once it is set: a
// family that has synced since the process started.
var syncedFamily = regexp.MustCompile(`(?m)^kubeproxy_sync_proxy_rules_last_timestamp_seconds\{ip_family="(IPv4|IPv6)"\} [1-9]`)

// testRestartWritesNothing: svcproxy stopped (SIGTERM) and started again
// with nothing changed adopts the table it left and writes nothing: `nft
// monitor` in the node's namespace sees no change from before the stop
// until both families have synced and a few seconds more. Found by
// bench-e2e at 1k Services: the first sync ran before the ServiceCIDRs'
// list had arrived, dropped the ranges' rules and wrote them back 30 ms
// later (8–16 changes at every restart; the small lists came first).
// iptables mode rewrites its chains at a restart, as upstream's does
// (iptables-restore of the whole table): there the rules it leaves must be
// the ones it found.
func testRestartWritesNothing(t *testing.T, c *F.Cluster) {
	n1 := c.Nodes[0]
	a := c.AddPod(n1, "qa")
	svc := c.CreateService(F.NewService("restart-quiet", corev1.ServiceTypeClusterIP))
	c.SetEndpoints(svc, F.EP{Pod: a})
	c.Expect("cli1", F.TCP(svc.Spec.ClusterIP, 80), converge, F.AllOf("qa"))

	before := ruleset(t, c, n1)
	if !strings.Contains(before, svc.Spec.ClusterIP) {
		t.Fatalf("%s: the ruleset holds no rule for %s before the restart:\n%s", n1.Name, svc.Spec.ClusterIP, before)
	}
	var changes func() []string
	stop := func() {}
	if F.UsesNFTables(c.Opts.Mode) {
		changes, stop = monitorNFTables(t, n1)
	}
	n1.Proxy.Stop(10 * time.Second)
	if err := c.StartProxy(n1); err != nil {
		t.Fatal(err)
	}
	waitBothFamiliesSynced(t, c, n1)
	time.Sleep(3 * time.Second) // a second sync would follow within minSyncPeriod
	stop()
	// Once synced the collector runs at svcproxy's steady GOGC (internal/app/gc.go).
	if text, err := c.Metrics(n1); err != nil || !steadyGOGC.MatchString(text) {
		t.Errorf("%s: /metrics after the restart's first sync has no go_gc_gogc_percent 50 (err %v): %s",
			n1.Name, err, gogcLine.FindString(text))
	}
	if changes != nil {
		if got := changes(); len(got) > 0 {
			t.Errorf("the restart with nothing changed wrote %d changes to the kernel, e.g.:\n%s",
				len(got), strings.Join(got[:min(len(got), 10)], "\n"))
		}
	}
	if after := ruleset(t, c, n1); after != before {
		t.Errorf("the rules differ after a restart with nothing changed:\nbefore:\n%s\nafter:\n%s", before, after)
	}
	c.Expect("cli1", F.TCP(svc.Spec.ClusterIP, 80), converge, F.AllOf("qa"))
}

// counters are iptables-save's and nft's packet and byte counts, which
// traffic moves.
var counters = regexp.MustCompile(`\[\d+:\d+\]|packets \d+ bytes \d+`)

// ruleset is n's ruleset without what changes by itself: iptables-save's
// comment lines (a timestamp) and the counters.
func ruleset(t *testing.T, c *F.Cluster, n *F.Node) string {
	t.Helper()
	text, err := c.Ruleset(n)
	if err != nil {
		t.Fatalf("%s: ruleset: %v", n.Name, err)
	}
	var b strings.Builder
	for line := range strings.Lines(text) {
		if !strings.HasPrefix(line, "#") {
			b.WriteString(counters.ReplaceAllString(line, "0"))
		}
	}
	return b.String()
}

// monitorNFTables runs `nft monitor` in n's namespace; changes returns the
// lines it printed (one per change) once stop has ended it.
func monitorNFTables(t *testing.T, n *F.Node) (changes func() []string, stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	cmd := exec.CommandContext(ctx, "ip", "netns", "exec", n.NS, "nft", "monitor")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("nft monitor: %v", err)
	}
	var mu sync.Mutex
	var lines []string
	done := make(chan struct{})
	go func() {
		defer close(done)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			mu.Lock()
			lines = append(lines, sc.Text())
			mu.Unlock()
		}
	}()
	time.Sleep(500 * time.Millisecond) // subscribed before anything happens
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			<-done
			_ = cmd.Wait()
		})
	}
	t.Cleanup(stop)
	return func() []string {
		mu.Lock()
		defer mu.Unlock()
		return append([]string(nil), lines...)
	}, stop
}

// waitBothFamiliesSynced polls n's /metrics until the IPv4 and the IPv6
// proxier have each stamped a sync.
func waitBothFamiliesSynced(t *testing.T, c *F.Cluster, n *F.Node) {
	t.Helper()
	deadline := time.Now().Add(converge)
	for {
		text, err := c.Metrics(n)
		if err == nil && len(syncedFamily.FindAllString(text, -1)) == 2 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not both families synced within %v after the restart (err %v)", n.Name, converge, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
