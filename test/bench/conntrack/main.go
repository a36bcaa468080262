// Command conntrack benchmarks the stale-flow reconciler against the real
// kernel, inside throwaway network namespaces: it fills a namespace's
// conntrack table with flows to UDP services (half of them DNATed to
// endpoints that no longer exist), times one reconcile round, and times a
// cold nftables sync of 10k services with and without a round running
// beside it. It prints numbers and asserts nothing. Needs root and nft.
//
//	go run ./test/bench/conntrack                 # 200k flows, 100k stale, 3 runs
//	go run ./test/bench/conntrack -flows 20000    # a smoke run
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/svcproxy/svcproxy/internal/conntrack"
	"github.com/svcproxy/svcproxy/pkg/pipeline/desired"
	"github.com/svcproxy/svcproxy/pkg/pipeline/model"
	"github.com/svcproxy/svcproxy/pkg/proxy"
	"github.com/svcproxy/svcproxy/pkg/testing/netnstest"
)

func main() { os.Exit(run()) }

func run() int {
	flows := flag.Int("flows", 200000, "conntrack entries to create; half are stale")
	services := flag.Int("services", 10000, "services in the concurrent nftables sync")
	runs := flag.Int("runs", 3, "runs; the table shows median [min–max]")
	flag.Parse()
	if os.Geteuid() != 0 {
		fmt.Fprintln(os.Stderr, "needs root (network namespaces, ctnetlink, nft)")
		return 1
	}
	lab, err := netnstest.NewLab()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer lab.Close()
	var rounds []roundResult
	var alone, beside []time.Duration
	for r := 0; r < *runs; r++ {
		fmt.Fprintf(os.Stderr, "run %d/%d\n", r+1, *runs)
		res, err := measureRun(lab, r, *flows, *services)
		if err != nil {
			fmt.Fprintln(os.Stderr, "failed:", err)
			return 1
		}
		rounds = append(rounds, res.round)
		alone, beside = append(alone, res.syncAlone), append(beside, res.syncBeside)
	}
	report(*flows, *services, rounds, alone, beside)
	return 0
}

type runResult struct {
	round                 roundResult
	syncAlone, syncBeside time.Duration
}

type roundResult struct {
	create      time.Duration // filling the table, for context
	wall, cpu   time.Duration
	listed      int
	deleted     int
	allocMB     float64
	besideRound time.Duration // the round that ran beside the sync
}

// measureRun: (1) a round alone on a full table; (2) a cold sync alone;
// (3) the table refilled with stale flows, then a round and a cold sync
// started together.
func measureRun(lab *netnstest.Lab, run, flows, services int) (runResult, error) {
	var out runResult
	node, err := newNode(lab, fmt.Sprintf("ct%d", run))
	if err != nil {
		return out, err
	}
	defer node.close()
	udp := udpWorld(flows)
	if out.round.create, err = node.fill(udp, flows, true); err != nil {
		return out, err
	}
	if err := node.roundAlone(udp.state, &out.round); err != nil {
		return out, err
	}
	if out.round.deleted != flows/2 {
		return out, fmt.Errorf("round deleted %d flows, want %d", out.round.deleted, flows/2)
	}
	tcp := tcpState(services)
	if out.syncAlone, err = coldSync(lab, fmt.Sprintf("sa%d", run), tcp); err != nil {
		return out, err
	}
	if _, err := node.fill(udp, flows, false); err != nil { // only the stale half again
		return out, err
	}
	out.syncBeside, out.round.besideRound, err = node.syncBesideRound(lab, fmt.Sprintf("sb%d", run), udp.state, tcp)
	return out, err
}

func (n *node) roundAlone(st *desired.State, res *roundResult) error {
	r := conntrack.New(proxy.IPv4, n.ct, conntrack.Options{RoundBudget: time.Minute})
	r.Observe(st, model.Changes{ConntrackCleanup: true})
	runtime.GC()
	var before runtime.MemStats
	runtime.ReadMemStats(&before)
	cpu0, start := cpuTime(), time.Now()
	rr, err := r.Reconcile(context.Background())
	res.wall, res.cpu = time.Since(start), cpuTime()-cpu0
	var after runtime.MemStats
	runtime.ReadMemStats(&after)
	res.allocMB = float64(after.TotalAlloc-before.TotalAlloc) / (1 << 20)
	res.listed, res.deleted = rr.Listed, rr.Deleted
	return err
}

func report(flows, services int, rounds []roundResult, alone, beside []time.Duration) {
	pick := func(f func(roundResult) time.Duration) []time.Duration {
		var out []time.Duration
		for _, r := range rounds {
			out = append(out, f(r))
		}
		return out
	}

	fmt.Printf("conntrack reconciler, %s, %s, %d CPUs, kernel %s, %d runs\n",
		time.Now().UTC().Format("2006-01-02"), cpuModel(), runtime.NumCPU(), kernelRelease(), len(rounds))

	fmt.Printf("table: %d UDP flows to %d services, %d stale (DNATed to removed endpoints)\n\n",
		flows, udpServices, flows/2)
	fmt.Println("| measure | median [min–max] |")
	fmt.Println("|---|---|")
	row := func(name string, ds []time.Duration) { fmt.Printf("| %s | %s |\n", name, spread(ds)) }
	row(fmt.Sprintf("create %d flows (setup, batched ctnetlink)", flows), pick(func(r roundResult) time.Duration { return r.create }))
	row(fmt.Sprintf("round: list %d + delete %d stale, wall", flows, flows/2), pick(func(r roundResult) time.Duration { return r.wall }))
	row("round: CPU (user+sys, whole process)", pick(func(r roundResult) time.Duration { return r.cpu }))
	row(fmt.Sprintf("cold nftables sync, %d services × 10 endpoints, alone", services), alone)
	row(fmt.Sprintf("cold nftables sync, %d services, beside a round deleting %d", services, flows/2), beside)
	row("that round, wall", pick(func(r roundResult) time.Duration { return r.besideRound }))
	var allocs []string
	for _, r := range rounds {
		allocs = append(allocs, fmt.Sprintf("%.0f", r.allocMB))
	}
	fmt.Printf("| round: Go allocation (MiB, per run) | %s |\n", strings.Join(allocs, ", "))
}

func spread(ds []time.Duration) string {
	s := slices.Clone(ds)
	slices.Sort(s)
	r := func(d time.Duration) string { return d.Round(time.Millisecond).String() }
	return fmt.Sprintf("%s [%s–%s]", r(s[len(s)/2]), r(s[0]), r(s[len(s)-1]))
}
