// Command cleanup measures svcproxy's start-up cleanup of the other proxy
// modes (internal/leftovers.OtherModes), which every start pays, in a fresh network
// namespace: empty, or holding the nftables table of a node that runs
// svcproxy with -services Services × 10 endpoints (the restart case). One
// run per process, so that one-time work (moby/ipvs's modprobe) is counted
// in each; it prints one JSON line: wall time, CPU of this process and of
// the tools it ran (getrusage RUSAGE_CHILDREN), and the cleanup's error.
//
//	go run ./test/bench/cleanup -services 10000
package main

import (
	"context"
	"flag"
	"fmt"
	"os"

	"github.com/svcproxy/svcproxy/internal/backends"
	"github.com/svcproxy/svcproxy/internal/leftovers"
	"github.com/svcproxy/svcproxy/pkg/pipeline/backends/nftables"
	"github.com/svcproxy/svcproxy/pkg/proxy"
	"github.com/svcproxy/svcproxy/pkg/testing/proxytest"
	"github.com/svcproxy/svcproxy/test/bench/internal/benchkit"
)

var (
	services = flag.Int("services", 0, "Services (× 10 endpoints) in the svcproxy nftables table present before the cleanup; 0: an empty namespace")
	mode     = flag.String("mode", string(proxy.ModeNFTables), "the proxy mode whose start-up cleanup runs")
)

// result is one run's measurement.
type result struct {
	Services int
	Mode     string
	benchkit.Times
	CleanupError string `json:",omitempty"`
}

func main() {
	flag.Parse()
	os.Exit(benchkit.ChildMain(func() (any, error) { return run() }))
}

func run() (*result, error) {
	ns, deleteNS, err := benchkit.Namespace()
	if err != nil {
		return nil, err
	}
	defer func() { _ = deleteNS() }()
	ctx := context.Background()
	if *services > 0 {
		if err := ns.Do(func() error { return programTable(ctx, *services) }); err != nil {
			return nil, fmt.Errorf("programming %d services: %w", *services, err)
		}
	}
	res := &result{Services: *services, Mode: *mode}
	var cleanupErr error
	res.Times, err = benchkit.Measure(func() error {
		return ns.Do(func() error {
			cleanupErr = leftovers.OtherModes(ctx, backends.Table, proxy.Mode(*mode), nil)
			return nil
		})
	})
	if err != nil {
		return nil, err
	}
	if cleanupErr != nil {
		res.CleanupError = cleanupErr.Error()
	}
	return res, nil
}

// programTable writes what svcproxy's nftables mode writes for n Services
// (IPv4), as a node that restarts finds it.
func programTable(ctx context.Context, n int) error {
	st, err := benchkit.BuildState(n, benchkit.NodeIP)
	if err != nil {
		return err
	}
	p, err := nftables.New(proxy.IPv4, nftables.Options{})
	if err != nil {
		return err
	}
	if err := p.Init(ctx); err != nil {
		return err
	}
	return p.Sync(ctx, st, proxytest.ModeOf(st))
}
