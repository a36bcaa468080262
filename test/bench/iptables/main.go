// Command iptables benchmarks svcproxy's iptables backend against the real
// kernel, on both iptables flavours (iptables-nft and iptables-legacy), and
// prints a table of medians beside upstream kube-proxy's numbers and the
// targets. It asserts nothing: the numbers are for people to read (and to
// quote in docs/performance.md).
//
// Each (flavour, scale, run) is measured by a child process of this binary
// inside a fresh network namespace, so every cold sync starts from empty
// tables and every RSS figure belongs to one flavour and scale. Needs root
// and both flavours' tools.
//
//	go run ./test/bench/iptables            # 1k and 10k services × 10 endpoints, 3 runs
//	go run ./test/bench/iptables -quick     # 1k and 2k, 1 run: a smoke test
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/svcproxy/svcproxy/pkg/kiptables"
	"github.com/svcproxy/svcproxy/test/bench/internal/benchkit"
)

func main() { os.Exit(run()) }

// config is the parent's command line.
type config struct {
	changes  int
	runs     int
	scales   []int
	flavours []kiptables.Flavour
	timeout  time.Duration
	heapDir  string
}

func run() int {
	var (
		child    = flag.Bool("child", false, "internal: measure one flavour at one scale and print JSON")
		flavour  = flag.String("flavour", "", "internal: flavour for -child")
		services = flag.Int("services", 0, "internal: services for -child")
		changes  = flag.Int("changes", 5, "single endpoint changes timed per scale and run")
		runs     = flag.Int("runs", 3, "runs per flavour and scale; the table shows median [min–max]")
		scales   = flag.String("scales", "1000,10000", "comma-separated service counts")
		flavours = flag.String("flavours", "nft,legacy", "comma-separated iptables flavours")
		quick    = flag.Bool("quick", false, "smoke run: scales 1000,2000, one run")
		timeout  = flag.Duration("timeout", 15*time.Minute, "limit per child run")
		jsonOut  = flag.String("json", "", "also write every raw result to this file")
		heapDir  = flag.String("heapprofile", "", "write heap profiles (in use, after a GC) into this directory while each phase's first iptables-restore runs and after each iptables-save")
	)
	flag.Parse()
	if *child {
		return childMain(kiptables.Flavour(*flavour), *services, *changes, *timeout, *heapDir)
	}
	if *quick {
		*scales, *runs = "1000,2000", 1
	}
	cfg := config{changes: *changes, runs: *runs, timeout: *timeout, heapDir: *heapDir}
	var err error
	if cfg.scales, err = benchkit.ParseScales(*scales, benchkit.MaxServices); err == nil {
		cfg.flavours, err = parseFlavours(*flavours)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	results, failures := runAll(cfg)
	if *jsonOut != "" {
		if err := writeJSON(*jsonOut, results); err != nil {
			fmt.Fprintln(os.Stderr, err)
		}
	}
	printReport(os.Stdout, cfg, results, failures)
	return 0
}

// key names one flavour at one scale.
type key struct {
	flavour kiptables.Flavour
	scale   int
}

// runAll interleaves runs (run 1 of everything, then run 2, ...) so a
// machine that slows down part-way hurts every cell alike.
func runAll(cfg config) (map[key][]*Result, map[key][]string) {
	results, failures := map[key][]*Result{}, map[key][]string{}
	for r := 0; r < cfg.runs; r++ {
		for _, fl := range cfg.flavours {
			for _, n := range cfg.scales {
				k := key{fl, n}
				fmt.Fprintf(os.Stderr, "run %d/%d: iptables-%s, %d services × %d endpoints...\n", r+1, cfg.runs, fl, n, benchkit.EndpointsPerService)
				res, err := spawnChild(fl, n, cfg)
				if err != nil {
					fmt.Fprintf(os.Stderr, "  failed: %v\n", err)
					failures[k] = append(failures[k], err.Error())
					continue
				}
				fmt.Fprintf(os.Stderr, "  cold %.0f ms, endpoint change %.0f ms, restart %.0f ms\n",
					res.Cold.WallMS, benchkit.Summarize(wallsOf(res.EndpointChange)).Med, res.Restart.WallMS)
				results[k] = append(results[k], res)
			}
		}
	}
	return results, failures
}

func childMain(flavour kiptables.Flavour, services, changes int, timeout time.Duration, heapDir string) int {
	if services <= 0 || (flavour != kiptables.FlavourNFT && flavour != kiptables.FlavourLegacy) {
		fmt.Fprintln(os.Stderr, "-child needs -services and -flavour nft|legacy")
		return 2
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	var heap *heapProfiler
	if heapDir != "" {
		heap = &heapProfiler{dir: heapDir, prefix: fmt.Sprintf("%s-%d", flavour, services), done: map[string]bool{}}
	}
	return benchkit.ChildMain(func() (any, error) { return runChild(ctx, flavour, services, changes, heap) })
}

// spawnChild runs this binary with -child for one flavour and scale. The
// child stops itself at timeout (and deletes its namespace); the parent
// waits a minute longer before it kills the child's whole process group,
// iptables tools included.
func spawnChild(flavour kiptables.Flavour, services int, cfg config) (*Result, error) {
	ctx, cancel := context.WithTimeout(context.Background(), cfg.timeout+time.Minute)
	defer cancel()
	child := benchkit.Child{OwnGroup: true, Args: []string{"-child", "-flavour", string(flavour), "-timeout", cfg.timeout.String(),
		"-services", strconv.Itoa(services), "-changes", strconv.Itoa(cfg.changes), "-heapprofile", cfg.heapDir}}
	var res Result
	if err := child.Run(ctx, &res); err != nil {
		return nil, err
	}
	return &res, nil
}

func parseFlavours(s string) ([]kiptables.Flavour, error) {
	var out []kiptables.Flavour
	for _, f := range strings.Split(s, ",") {
		fl := kiptables.Flavour(strings.TrimSpace(f))
		if fl != kiptables.FlavourNFT && fl != kiptables.FlavourLegacy {
			return nil, fmt.Errorf("bad flavour %q (nft, legacy)", f)
		}
		out = append(out, fl)
	}
	return out, nil
}

func writeJSON(path string, results map[key][]*Result) error {
	flat := map[string][]*Result{}
	for k, rs := range results {
		flat[fmt.Sprintf("%s/%d", k.flavour, k.scale)] = rs
	}
	return benchkit.WriteJSON(path, flat)
}
