//go:build benche2e

package bench

import (
	"fmt"
	"io"
	"math"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	F "github.com/svcproxy/svcproxy/test/e2e/framework"
)

// runResult is one run of one mode. Times in seconds, sizes in KiB.
type runResult struct {
	Mode        string
	Run         int
	Load1Before float64
	Load1After  float64
	ClusterUp   float64 // namespaces + control plane from the seed + RBAC + Node (before fillCluster)

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
	// MapLive (ebpf mode): process start → the end of the hooks half of
	// the same sync, checked in the hooks' services map in the same quiet
	// moment: every ClusterIP the API lists was translated at connect from
	// then on. MapIPs: the ClusterIPs found in that map. -1 in the other
	// modes, and MapLive -1 when the map missed some.
	MapLive float64
	MapIPs  int
	// ServiceRecords and BackendSlots: ebpf mode's map entries once
	// every ClusterIP is in the kernel (-1 in the other modes).
	ServiceRecords, BackendSlots float64
	// MapMemlockKiB: the memlock of the BPF maps the proxy holds, at the
	// end of the cold run (0 in the other modes).
	MapMemlockKiB int64

	Churn    churnResult
	Datapath datapathResult
	// DPRefBefore and DPRefAfter are the datapath on the
	// -dp-ref-services cluster, measured just before and just after this
	// round of runs (nil: none).
	DPRefBefore *datapathResult `json:",omitempty"`
	DPRefAfter  *datapathResult `json:",omitempty"`
	FullSync    fullSyncResult
	Restart     restartResult
	// CPUToFirstSync: the proxy's CPU seconds (its waited-for children
	// included) from its start to the end of its first sync.
	CPUToFirstSync float64
	// ListFloor: seconds a decode-only client takes for the same initial
	// lists, after the run (measureListFloor).
	ListFloor float64
	// PlainListFloor: the same with one plain LIST per kind.
	PlainListFloor float64
	// PagedListFloor: the same with consistent LISTs in pages;
	// PagedListCPCPU the CPU seconds etcd and kube-apiserver spent on
	// them. The *Plain pair: the same without asking for gzip.
	PagedListFloor, PagedListCPCPU           float64
	PagedListFloorPlain, PagedListCPCPUPlain float64

	RSSAfterFirstSync int64 // svcproxy VmHWM right after the first sync
	// SpeedBeforeStart is cpuSpeed's seconds just before the start.
	SpeedBeforeStart float64
	// IdleBeforeStart is the machine's idle share over the second before
	// the proxy started (waitIdle).
	IdleBeforeStart float64
	// ListenersBeforeStart: nf_tables listeners this process could see
	// just before the start (visibleNftablesListeners).
	ListenersBeforeStart int
	RSSPeak              int64 // svcproxy VmHWM at the end of the run
	Children             []childPeak
	WaitMaxRSS           int64 // wait4 maxrss: max(svcproxy, largest child, this binary at the spawn)
}

// runOnce builds a one-node cluster from the seed, starts svcproxy and
// measures it; the cluster goes away with t's cleanup.
func runOnce(t *testing.T, mode string, run int, seedDir string) runResult {
	res := runResult{Mode: mode, Run: run, Load1Before: load1()}
	t0 := time.Now()
	proxyMode, bin := proxyBinary(t, mode)
	opts := F.Options{Mode: proxyMode, Nodes: 1, NoProxy: true, SeedDir: seedDir,
		SyncPeriod: *flagSyncPeriod, MinSyncPeriod: *flagMinSync, ForeignProxy: bin != "",
		ServiceCIDR: serviceCIDRFor(*flagServices)}
	if *flagProfile {
		opts.ExtraConfig = "enableProfiling: true\n" // /debug/pprof, for saveHeapProfile
		opts.KeepWork = true                         // the profiles are kept in the cluster's dir
	}
	if strings.HasPrefix(mode, "baseline-") {
		opts.ExtraConfig += *flagBaselineCfg
	}
	c := F.New(t, opts)
	res.ClusterUp = time.Since(t0).Seconds()
	if from := seededViaAPI(*flagServices); from < *flagServices {
		fillCluster(t, c, from, *flagServices, *flagEndpoints)
	}
	if bin != "" {
		c.Bins.SvcProxy = bin // same config, flags and namespace
	}
	n := c.Nodes[0]
	res.IdleBeforeStart = waitIdle(t, "start")
	res.SpeedBeforeStart = cpuSpeed()
	if res.ListenersBeforeStart = visibleNftablesListeners(); res.ListenersBeforeStart != 0 {
		t.Logf("start: %d nf_tables listeners on the machine (-1: unknown): the kernel builds a notification per change, the start is slower", res.ListenersBeforeStart)
	}
	t.Logf("start: a fixed 1-CPU workload (SHA-256 of 32 MiB, best of 3) took %.0f ms", 1000*res.SpeedBeforeStart)
	start := time.Now()
	if err := c.StartProxy(n); err != nil {
		t.Fatal(err)
	}
	mon := startChildMonitor(n.Proxy.Pid())
	defer mon.finish()
	timeline := hwmTimeline(n.Proxy.Pid(), start)
	res.FirstSync = waitFirstSync(t, c, n, start)
	res.CPUToFirstSync = cpuSeconds(n.Proxy.Pid())
	_, res.RSSAfterFirstSync, _ = procStatus(n.Proxy.Pid())
	t.Logf("first sync %.2f s after start; svcproxy VmHWM %d MiB (%s); VmHWM grew at %s", res.FirstSync,
		res.RSSAfterFirstSync>>10, rssParts(n.Proxy.Pid()), timeline())
	waitProgrammed(t, c, n, start, &res)
	live := scrape(t, c, n)
	res.ServiceRecords, res.BackendSlots = live.mapEntries("services"), live.mapEntries("backends")
	if *flagProfile {
		saveHeapProfile(t, c, n, filepath.Join(c.Work, "heap-first.pprof"))
	}
	res.Churn = runChurn(t, c, n)
	t.Logf("after the churn: %s", rssParts(n.Proxy.Pid()))
	if *flagProfile {
		saveHeapProfile(t, c, n, filepath.Join(c.Work, "heap-churned.pprof"))
	}
	res.Datapath = measureDatapath(t, c, n)
	res.FullSync = measureFullSync(t, c, n)
	_, res.RSSPeak, _ = procStatus(n.Proxy.Pid())
	res.MapMemlockKiB = mapMemlockKiB(n.Proxy.Pid())
	res.Children = mon.finish()
	first := n.Proxy
	res.Restart = measureRestart(t, c, n) // stops the first process
	if ru := first.Rusage(); ru != nil {
		res.WaitMaxRSS = ru.Maxrss
	}
	n.Proxy.Stop(30 * time.Second)
	if *flagListFloors {
		res.ListFloor = measureListFloor(t, c)
		res.PlainListFloor = measurePlainListFloor(t, c)
		res.PagedListFloor, res.PagedListCPCPU = measurePagedListFloor(t, c, true)
		res.PagedListFloorPlain, res.PagedListCPCPUPlain = measurePagedListFloor(t, c, false)
	} else { // not measured: printed as "–"
		res.ListFloor, res.PlainListFloor, res.PagedListFloor, res.PagedListFloorPlain = -1, -1, -1, -1
	}
	res.Load1After = load1()
	return res
}

// proxyBinary splits a mode into the proxy mode and the binary to run
// instead of the svcproxy under test ("" for that one): upstream-<mode> is
// -upstream (kube-proxy), baseline-<mode> is -baseline.
func proxyBinary(t *testing.T, mode string) (string, string) {
	for prefix, bin := range map[string]string{"upstream-": *flagUpstream, "baseline-": *flagBaseline} {
		if m, ok := strings.CutPrefix(mode, prefix); ok {
			if bin == "" {
				t.Fatalf("mode %s needs -%s", mode, strings.TrimSuffix(prefix, "-"))
			}
			return m, bin
		}
	}
	return mode, ""
}

// waitFirstSync polls /metrics until svcproxy reports a successful sync
// and returns when that sync ended (svcproxy's own stamp, not when the
// poll saw it). svcproxy syncs first once its informers report synced;
// whether that sync held every Service is waitProgrammed's question.
//
// The poll must not cost the start it measures: a scrape asks for no gzip
// (compressing /metrics was ≈ 0.2 s of svcproxy's CPU before its first sync
// at 10k × 10, polled every 50 ms) and comes every 200 ms; the result is
// the proxy's own stamp, so the interval does not change it.
func waitFirstSync(t *testing.T, c *F.Cluster, n *F.Node, start time.Time) float64 {
	deadline := time.Now().Add(*flagStartTimeout)
	for time.Now().Before(deadline) {
		if text, err := plainMetrics(c, n); err == nil {
			if ts := parseMetrics(text).ipv4Value(metricLastSync); ts > 0 {
				return ts - float64(start.UnixNano())/1e9
			}
		}
		if !n.Proxy.Alive() {
			t.Fatalf("svcproxy exited before its first sync:\n%s", n.Proxy.Tail(3000))
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Fatalf("no successful sync within %v:\n%s", *flagStartTimeout, n.Proxy.Tail(3000))
	return 0
}

// none turns "no observation" (NaN) into -1: JSON has no NaN, and the
// report prints negative values as "–".
func none(v float64) float64 {
	if math.IsNaN(v) {
		return -1
	}
	return v
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

// plainMetrics scrapes node n's /metrics without asking for compression.
func plainMetrics(c *F.Cluster, n *F.Node) (string, error) {
	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{
		DialContext: F.DialerIn(c.NS("ext")), DisableKeepAlives: true, DisableCompression: true, Proxy: nil}}
	resp, err := client.Get(fmt.Sprintf("http://%s:10249/metrics", n.IP))
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	if err == nil && resp.StatusCode != http.StatusOK {
		err = fmt.Errorf("/metrics: HTTP %d", resp.StatusCode)
	}
	return string(body), err
}
