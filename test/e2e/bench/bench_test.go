//go:build benche2e

package bench

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

var (
	flagModes         = flag.String("modes", "nftables", "proxy modes to measure, separated by commas or spaces (nftables, iptables, ebpf, upstream-nftables, upstream-iptables, baseline-nftables, baseline-iptables)")
	flagRuns          = flag.Int("runs", 5, "runs per mode, each on a fresh cluster from the seed")
	flagServices      = flag.Int("services", 10000, "Services (one EndpointSlice each)")
	flagEndpoints     = flag.Int("endpoints", 10, "endpoints per slice")
	flagSeedAPI       = flag.Int("seed-api", 10000, "seed at most this many Services through the API; the rest are copies of Service 0's stored objects written into etcd")
	flagChanges       = flag.Int("changes", 6000, "EndpointSlice updates in the churn")
	flagRate          = flag.Float64("rate", 100, "churn updates per second")
	flagMinSync       = flag.String("min-sync-period", "", "svcproxy's minSyncPeriod (empty or 0s: the default, 1s; 1ms for a sync per change)")
	flagSyncPeriod    = flag.Duration("sync-period", 30*time.Second, "svcproxy's syncPeriod (kube-proxy's default 30s)")
	flagStartTimeout  = flag.Duration("start-timeout", 15*time.Minute, "limit for the first sync")
	flagBaseline      = flag.String("baseline", "", "another svcproxy binary (e.g. main's), for the modes baseline-nftables and baseline-iptables")
	flagBaselineCfg   = flag.String("baseline-config", "", "KubeProxyConfiguration lines (top-level YAML) added for the baseline-* modes only: the same binary with another setting, runs alternating")
	flagUpstream      = flag.String("upstream", "", "upstream kube-proxy binary, for the modes upstream-nftables and upstream-iptables")
	flagDPConns       = flag.Int("dp-conns", 16, "datapath: connections in flight")
	flagDPDuration    = flag.Duration("dp-duration", 10*time.Second, "datapath: how long to measure the new-connection rate (0: not at all)")
	flagDPLatency     = flag.Duration("dp-latency-duration", 5*time.Second, "datapath: with the control plane stopped, windows of one connection in flight through the ClusterIP and direct, for latency (0: none)")
	flagDPPaused      = flag.Bool("dp-paused", true, "datapath: also measure a window with etcd and kube-apiserver stopped (SIGSTOP)")
	flagDPPerf        = flag.Bool("dp-perf", false, "datapath: record perf record -a -g during the window with the control plane stopped (perf-datapath.data in the cluster's work dir)")
	flagDPRefServices = flag.Int("dp-ref-services", 0, "datapath: before each round of runs and after the last, measure the datapath alone on a cluster of this many Services (its own seed): the reference for the ratio, measured in the same invocation")
	flagDPReference   = flag.Float64("dp-reference", 0, "datapath: the 1k run's connections/s, for the 50k target (90 % of it)")
	flagIdleShare     = flag.Float64("idle-share", 0.9, "before a start and a restart, wait until the machine was this idle over one second (0: do not wait)")
	flagIdleWait      = flag.Duration("idle-wait", time.Minute, "the longest wait for -idle-share")
	flagProfile       = flag.Bool("profile", false, "run the proxy with enableProfiling and keep its heap profiles (after the first sync, after the churn, after the restart) in the cluster's work dir")
	flagListFloors    = flag.Bool("list-floors", true, "after each run, time a decode-only client's initial lists (four ways; minutes at 100k)")
	flagJSON          = flag.String("json", "", "also write the results here (default _output/bench-e2e/results-<time>.json)")
)

// TestBenchE2E seeds (or reuses) the etcd data, then measures every mode
// flagRuns times and prints one table.
func TestBenchE2E(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("needs root (network namespaces): run make bench-e2e")
	}
	seedDir := ensureSeed(t, *flagServices)
	refSeed := ""
	if *flagDPRefServices > 0 && *flagDPDuration > 0 {
		refSeed = ensureSeed(t, *flagDPRefServices)
	}
	var results []runResult
	// Runs alternate between the modes (run 1 of each, then run 2 …), so
	// that a change in the machine's load falls on every mode alike; the
	// datapath reference, if any, is measured before each round and after
	// the last, and each round is compared with the mean of the two around
	// it.
	ref := func(run int) *datapathResult {
		if refSeed == "" {
			return nil
		}
		var r *datapathResult
		t.Run(fmt.Sprintf("dp-ref-%d-%d", *flagDPRefServices, run), func(t *testing.T) {
			r = datapathReference(t, refSeed)
		})
		return r
	}
	before := ref(1)
	for run := 1; run <= *flagRuns; run++ {
		first := len(results)
		for _, mode := range modeList() {
			t.Run(fmt.Sprintf("%s-%d", mode, run), func(t *testing.T) {
				results = append(results, runOnce(t, mode, run, seedDir))
			})
		}
		after := ref(run + 1)
		for i := first; i < len(results); i++ {
			results[i].DPRefBefore, results[i].DPRefAfter = before, after
		}
		before = after
	}
	printReport(os.Stdout, results)
	if err := writeJSON(results); err != nil {
		t.Error(err)
	}
}

// modeList is -modes split at commas or spaces.
func modeList() []string {
	return strings.FieldsFunc(*flagModes, func(r rune) bool { return r == ',' || r == ' ' })
}

func writeJSON(results []runResult) error {
	path := *flagJSON
	if path == "" {
		dir, err := seedPath(*flagServices)
		if err != nil {
			return err
		}
		path = filepath.Join(filepath.Dir(dir), "results-"+time.Now().UTC().Format("20060102T150405Z")+".json")
	}
	b, err := json.MarshalIndent(map[string]any{
		"services": *flagServices, "endpoints": *flagEndpoints, "changes": *flagChanges,
		"rate": *flagRate, "minSyncPeriod": *flagMinSync, "syncPeriod": flagSyncPeriod.String(),
		"dpConns": *flagDPConns, "dpDuration": flagDPDuration.String(), "dpLatencyDuration": flagDPLatency.String(), "dpRefServices": *flagDPRefServices,
		"runs": results,
	}, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		return fmt.Errorf("writing results: %w", err)
	}
	fmt.Printf("results: %s\n", path)
	return nil
}
