// Command ipvs benchmarks svcproxy's IPVS backend against its nftables
// backend on the same kernel and prints both and their ratio. It asserts
// nothing. It runs inside the IPVS test VM (hack/ipvs-vm.sh --bench; this
// machine's kernel has no IPVS), so absolute numbers are TCG numbers: read
// the ratio, not the milliseconds.
//
// Every backend and scale gets a fresh network namespace with one dummy
// "node" address for node ports, deleted at the end.
//
//	vm.bin [-services 1000,10000] [-changes 3]
package main

import (
	"context"
	"flag"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/svcproxy/svcproxy/pkg/pipeline/backends/ipvs"
	"github.com/svcproxy/svcproxy/pkg/pipeline/backends/nftables"
	"github.com/svcproxy/svcproxy/pkg/pipeline/desired"
	"github.com/svcproxy/svcproxy/pkg/proxy"
	"github.com/svcproxy/svcproxy/pkg/testing/netnstest"
	"github.com/svcproxy/svcproxy/pkg/testing/proxytest"
	"github.com/svcproxy/svcproxy/test/bench/internal/benchkit"
)

// backend is what the benchmark needs of a Proxier; both backends it
// compares hold netlink sockets that Close releases.
type backend interface {
	Init(context.Context) error
	Sync(context.Context, *desired.State, proxy.SyncMode) error
	Cleanup(context.Context) error
	Close()
}

// result is one backend at one scale, in milliseconds.
type result struct {
	init, cold, restart float64
	changes             []float64 // one endpoint moved, one Sync each
}

func main() { os.Exit(run()) }

func run() int {
	services := flag.String("services", "1000,10000", "comma-separated service counts")
	changes := flag.Int("changes", 3, "single-endpoint changes timed per backend and scale")
	flag.Parse()
	var counts []int
	for _, f := range strings.Split(*services, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n <= 0 || n > maxServices {
			fmt.Fprintf(os.Stderr, "bad service count %q (1..%d)\n", f, maxServices)
			return 2
		}
		counts = append(counts, n)
	}
	makers := map[string]func() (backend, error){
		"ipvs":     func() (backend, error) { return ipvs.New(proxy.IPv4, ipvs.Options{ReapInterval: -1}) },
		"nftables": func() (backend, error) { return nftables.New(proxy.IPv4, nftables.Options{}) },
	}
	rows := map[int]map[string]*result{}
	failed := false
	for _, n := range counts {
		rows[n] = map[string]*result{}
		for _, name := range []string{"ipvs", "nftables"} {
			fmt.Fprintf(os.Stderr, "%s: %d services × %d endpoints...\n", name, n, benchkit.EndpointsPerService)
			r, err := measure(makers[name], n, *changes)
			if err != nil {
				fmt.Fprintf(os.Stderr, "  %s at %d: %s\n", name, n, firstLines(err.Error(), 3))
				failed = true
				continue
			}
			fmt.Fprintf(os.Stderr, "  init %.0f ms, cold %.0f ms, change %.0f ms, restart %.0f ms\n",
				r.init, r.cold, median(r.changes), r.restart)
			rows[n][name] = r
		}
	}
	report(counts, rows)
	if failed {
		return 1
	}
	return 0
}

// measure programs n services into a fresh namespace with one backend:
// Init, the cold full Sync, single-endpoint changes, then a restart (a new
// Proxier, Init and a full Sync of the unchanged State), and cleans up.
func measure(newBackend func() (backend, error), n, changes int) (*result, error) {
	st, err := benchkit.BuildState(n, benchNodeIP)
	if err != nil {
		return nil, err
	}
	ns, deleteNS, err := benchkit.Namespace()
	if err != nil {
		return nil, err
	}
	defer deleteNS()
	if err := addNodeAddr(ns); err != nil {
		return nil, err
	}
	ctx := context.Background()
	r := &result{}
	var p backend
	start := func() (err error) {
		if p, err = newBackend(); err != nil {
			return err
		}
		return p.Init(ctx)
	}
	if r.init, err = timed(ns, start); err != nil {
		return nil, fmt.Errorf("init: %w", err)
	}
	if r.cold, err = timed(ns, func() error { return p.Sync(ctx, st, proxytest.ModeOf(st)) }); err != nil {
		return nil, fmt.Errorf("cold sync: %w", err)
	}
	cur := st
	for k := range changes {
		cur = benchkit.WithEndpointMoved(cur, (k*7919)%n, k)
		next := cur
		d, err := timed(ns, func() error { return p.Sync(ctx, next, proxytest.ModeOf(next)) })
		if err != nil {
			return nil, fmt.Errorf("endpoint change %d: %w", k, err)
		}
		r.changes = append(r.changes, d)
	}
	p.Close()
	if r.restart, err = timed(ns, func() error {
		if err := start(); err != nil {
			return err
		}
		return p.Sync(ctx, benchkit.FullSync(cur), proxytest.ModeOf(benchkit.FullSync(cur)))
	}); err != nil {
		return nil, fmt.Errorf("restart: %w", err)
	}
	if err := ns.Do(func() error { return p.Cleanup(ctx) }); err != nil {
		return nil, fmt.Errorf("cleanup: %w", err)
	}
	p.Close()
	return r, nil
}

// addNodeAddr gives the namespace a "node" interface: IPVS mode puts node
// ports on every non-loopback address.
func addNodeAddr(ns *netnstest.NS) error {
	if _, err := ns.Run(context.Background(), "ip", "link", "add", "eth0", "type", "dummy"); err != nil {
		return err
	}
	if err := ns.LinkUp("eth0"); err != nil {
		return err
	}
	return ns.AddAddr("eth0", netip.PrefixFrom(benchNodeIP, 32))
}

// firstLines keeps a joined error readable: a failed sync reports every
// failed kernel call, one per line.
func firstLines(s string, n int) string {
	lines := strings.Split(s, "\n")
	if len(lines) <= n {
		return s
	}
	return fmt.Sprintf("%s\n  ... and %d more", strings.Join(lines[:n], "\n  "), len(lines)-n)
}

func timed(ns *netnstest.NS, fn func() error) (float64, error) {
	t := time.Now()
	err := ns.Do(fn)
	return float64(time.Since(t).Microseconds()) / 1000, err
}

func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := slices.Clone(v)
	slices.Sort(s)
	return s[len(s)/2]
}

func report(counts []int, rows map[int]map[string]*result) {
	kernel, _ := exec.Command("uname", "-r").Output()
	fmt.Printf("IPVS vs nftables backend, IPv4, %d endpoints per service, kernel %s, %s\n",
		benchkit.EndpointsPerService, strings.TrimSpace(string(kernel)), time.Now().UTC().Format(time.RFC3339))
	fmt.Println("times in ms; change = median Sync after one endpoint moved; restart = new Proxier + Init + full Sync, unchanged State")
	fmt.Printf("%-9s %-9s %9s %9s %9s %9s\n", "services", "backend", "init", "cold", "change", "restart")
	for _, n := range counts {
		for _, name := range []string{"ipvs", "nftables"} {
			if r := rows[n][name]; r != nil {
				fmt.Printf("%-9d %-9s %9.0f %9.0f %9.1f %9.0f\n", n, name, r.init, r.cold, median(r.changes), r.restart)
			} else {
				fmt.Printf("%-9d %-9s %9s\n", n, name, "failed")
			}
		}
		iv, nf := rows[n]["ipvs"], rows[n]["nftables"]
		if iv != nil && nf != nil {
			fmt.Printf("%-9d %-9s %9s %8.1fx %8.1fx %8.1fx\n", n, "ipvs/nft", "",
				iv.cold/nf.cold, median(iv.changes)/median(nf.changes), iv.restart/nf.restart)
		}
	}
}
