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
	flagModes        = flag.String("modes", "nftables", "proxy modes to measure, comma-separated (nftables,iptables)")
	flagRuns         = flag.Int("runs", 3, "runs per mode, each on a fresh cluster from the seed")
	flagServices     = flag.Int("services", 10000, "Services (one EndpointSlice each)")
	flagEndpoints    = flag.Int("endpoints", 10, "endpoints per slice")
	flagChanges      = flag.Int("changes", 300, "EndpointSlice updates in the churn")
	flagRate         = flag.Float64("rate", 4, "churn updates per second")
	flagMinSync      = flag.String("min-sync-period", "", "svcproxy's minSyncPeriod (empty or 0s: the default, 1s; 1ms for a sync per change)")
	flagSyncPeriod   = flag.Duration("sync-period", 30*time.Second, "svcproxy's syncPeriod (kube-proxy's default 30s)")
	flagStartTimeout = flag.Duration("start-timeout", 15*time.Minute, "limit for the first sync")
	flagJSON         = flag.String("json", "", "also write the results here (default _output/bench-e2e/results-<time>.json)")
)

// TestBenchE2E seeds (or reuses) the etcd data, then measures every mode
// flagRuns times and prints one table.
func TestBenchE2E(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("needs root (network namespaces): run make bench-e2e")
	}
	seedDir := ensureSeed(t)
	var results []runResult
	for _, mode := range strings.Split(*flagModes, ",") {
		for run := 1; run <= *flagRuns; run++ {
			t.Run(fmt.Sprintf("%s-%d", mode, run), func(t *testing.T) {
				results = append(results, runOnce(t, mode, run, seedDir))
			})
		}
	}
	printReport(os.Stdout, results)
	if err := writeJSON(results); err != nil {
		t.Error(err)
	}
}

func writeJSON(results []runResult) error {
	path := *flagJSON
	if path == "" {
		dir, err := seedPath()
		if err != nil {
			return err
		}
		path = filepath.Join(filepath.Dir(dir), "results-"+time.Now().UTC().Format("20060102T150405Z")+".json")
	}
	b, err := json.MarshalIndent(map[string]any{
		"services": *flagServices, "endpoints": *flagEndpoints, "changes": *flagChanges,
		"rate": *flagRate, "minSyncPeriod": *flagMinSync, "syncPeriod": flagSyncPeriod.String(),
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
