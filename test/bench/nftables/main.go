// Command nftables benchmarks svcproxy's nftables backend against the real
// kernel and prints a table of medians beside the targets of
// reference/peers-and-numbers.md §5. It asserts nothing: the numbers are
// for people to read (and to quote in docs/performance.md).
//
// Each (scale, run) is measured by a child process of this binary inside a
// fresh network namespace, so every cold sync starts from an empty kernel
// table and every RSS figure belongs to one scale. Needs root and nft.
//
//	go run ./test/bench/nftables            # 1k, 10k, 50k services × 10 endpoints, 3 runs
//	go run ./test/bench/nftables -quick     # 1k and 2k, 1 run: a smoke test
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"strconv"
	"time"

	"github.com/svcproxy/svcproxy/test/bench/internal/benchkit"
)

// nftRSS is read by the child too (spawnChild passes it on).
var nftRSS = flag.Bool("nftrss", true, "measure the nft processes' own peak RSS through a shim (nftshim.go; adds ≈ 10 ms of start-up to each nft run)")

// transport is read by the child too: "knft" (the backend's own, netlink
// elements and read-back) or "knftables" (everything through knftables:
// one nft command per element, read-back by its JSON listings), the
// alternative pkg/knft/README.md measures it against.
var transport = flag.String("transport", "knft", `the backend's way to the kernel: "knft" or "knftables"`)

func main() {
	if isShim() {
		os.Exit(shimMain())
	}
	os.Exit(run())
}

func run() int {
	var (
		child    = flag.Bool("child", false, "internal: measure one scale and print JSON")
		services = flag.Int("services", 0, "internal: services for -child")
		changes  = flag.Int("changes", 5, "single changes timed per scale and run")
		runs     = flag.Int("runs", 3, "runs per scale; the table shows median [min–max]")
		scales   = flag.String("scales", "1000,10000,50000", "comma-separated service counts")
		quick    = flag.Bool("quick", false, "smoke run: scales 1000,2000, one run")
		timeout  = flag.Duration("timeout", 15*time.Minute, "limit per child run")
		jsonOut  = flag.String("json", "", "also write every raw result to this file")
		profile  = flag.String("cpuprofile", "", "write CPU profiles of each cold sync and restart to FILE.<services>[.restart], heap profiles after them to the same names + .heap")
	)
	flag.Parse()
	if *child {
		return childMain(*services, *changes, *profile)
	}
	if *quick {
		*scales, *runs = "1000,2000", 1
	}
	counts, err := benchkit.ParseScales(*scales, benchkit.MaxServices)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	results := map[int][]*Result{}
	failures := map[int][]string{}
	for r := 0; r < *runs; r++ {
		for _, n := range counts {
			fmt.Fprintf(os.Stderr, "run %d/%d: %d services × %d endpoints...\n", r+1, *runs, n, benchkit.EndpointsPerService)
			res, err := spawnChild(n, *changes, *timeout, *profile)
			if err != nil {
				fmt.Fprintf(os.Stderr, "  failed: %v\n", err)
				failures[n] = append(failures[n], err.Error())
				continue
			}
			fmt.Fprintf(os.Stderr, "  cold %.0f ms, restart %.0f ms\n", res.Cold.WallMS, res.Restart.WallMS)
			results[n] = append(results[n], res)
		}
	}
	if *jsonOut != "" {
		if err := benchkit.WriteJSON(*jsonOut, results); err != nil {
			fmt.Fprintln(os.Stderr, err)
		}
	}
	printReport(os.Stdout, counts, results, failures, *runs)
	return 0
}

func childMain(services, changes int, profile string) int {
	if services <= 0 {
		fmt.Fprintln(os.Stderr, "-child needs -services")
		return 2
	}
	return benchkit.ChildMain(func() (any, error) { return runChild(services, changes, profile) })
}

// spawnChild runs this binary with -child for one scale.
func spawnChild(services, changes int, timeout time.Duration, profile string) (*Result, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	args := []string{"-child", "-services", strconv.Itoa(services), "-changes", strconv.Itoa(changes), "-transport", *transport}
	if !*nftRSS {
		args = append(args, "-nftrss=false")
	}
	if profile != "" {
		args = append(args, "-cpuprofile", fmt.Sprintf("%s.%d", profile, services))
	}
	var res Result
	if err := (benchkit.Child{Args: args}).Run(ctx, &res); err != nil {
		return nil, err
	}
	return &res, nil
}
