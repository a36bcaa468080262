package main

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"runtime/pprof"
	"time"

	"sigs.k8s.io/knftables"

	"github.com/svcproxy/svcproxy/pkg/knft"
	"github.com/svcproxy/svcproxy/pkg/pipeline/backends/nftables"
	"github.com/svcproxy/svcproxy/pkg/pipeline/desired"
	"github.com/svcproxy/svcproxy/pkg/proxy"
	"github.com/svcproxy/svcproxy/pkg/testing/netnstest"
	"github.com/svcproxy/svcproxy/pkg/testing/proxytest"
	"github.com/svcproxy/svcproxy/test/bench/internal/benchkit"
)

// Sample is one timed operation. Nft* is CPU time of the nft processes the
// operation ran (their system time is where the kernel applies the
// transaction: netlink batches are processed in the sender's context);
// Self* is this process's own CPU time (rendering and diffing).
type Sample struct {
	WallMS     float64 `json:"wall_ms"`
	NftUserMS  float64 `json:"nft_user_ms"`
	NftSysMS   float64 `json:"nft_sys_ms"`
	SelfUserMS float64 `json:"self_user_ms"`
	SelfSysMS  float64 `json:"self_sys_ms"`
}

// Result is everything one child measures at one scale.
type Result struct {
	Services       int            `json:"services"`
	Endpoints      int            `json:"endpoints"`
	BuildMS        float64        `json:"build_ms"`
	Init           Sample         `json:"init"`
	Cold           Sample         `json:"cold"`
	EndpointChange []Sample       `json:"endpoint_change"`
	ServiceAdd     []Sample       `json:"service_add"`
	Restart        Sample         `json:"restart"` // New + Init + full Sync of the unchanged state
	RestartEvents  map[string]int `json:"restart_events"`
	Cleanup        Sample         `json:"cleanup"`
	SelfHWMKiB     int64          `json:"self_hwm_kib"`  // VmHWM at the end
	SelfHWMColdKiB int64          `json:"self_hwm_cold"` // VmHWM right after the cold sync
	// The restart's own peak: VmHWM reset before it (benchkit.ResetHWM),
	// read after it; and VmRSS before it (the State and the runtime).
	SelfHWMRestartKiB int64 `json:"self_hwm_restart_kib"`
	SelfRSSPreRestart int64 `json:"self_rss_pre_restart_kib"`
	NftMaxRSSKiB      int64 `json:"nft_maxrss_kib"` // the nft processes' own peak (nftshim.go)
}

// runChild measures one scale inside a fresh network namespace of its own.
// The whole namespace (and with it every kernel object) is deleted at the
// end, whatever happens.
func runChild(services, changes int, profile string) (*Result, error) {
	nftLog := ""
	if *nftRSS {
		log, removeShim, err := installShim()
		if err != nil {
			return nil, err
		}
		defer removeShim()
		nftLog = log
	}
	ns, deleteNS, err := benchkit.Namespace()
	if err != nil {
		return nil, err
	}
	defer deleteNS()
	res := &Result{Services: services, Endpoints: services * benchkit.EndpointsPerService}

	start := time.Now()
	st, err := benchkit.BuildState(services, benchkit.NodeIP)
	if err != nil {
		return nil, err
	}
	res.BuildMS = benchkit.MS(time.Since(start))

	ctx := context.Background()
	var p *nftables.Proxier
	if res.Init, err = measure(ns, func() (err error) {
		if p, err = newProxier(); err != nil {
			return err
		}
		return p.Init(ctx)
	}); err != nil {
		return nil, fmt.Errorf("init: %w", err)
	}
	stop, err := startProfile(profile)
	if err != nil {
		return nil, err
	}
	res.Cold, err = measure(ns, func() error { return p.Sync(ctx, st, proxytest.ModeOf(st)) })
	stop()
	if err != nil {
		return nil, fmt.Errorf("cold sync: %w", err)
	}
	if err := writeHeapProfile(profile); err != nil {
		return nil, err
	}
	res.SelfHWMColdKiB = benchkit.ReadHWM()

	cur, err := incrementalPhases(ns, p, st, services, changes, res)
	if err != nil {
		return nil, err
	}
	// A restart is a new process: the old Proxier's store would not be
	// there to share the heap with the new one, nor its sockets.
	p.Close()
	p = nil
	hwm := benchkit.ReadHWM()
	if err := benchkit.ResetHWM(); err != nil {
		return nil, err
	}
	res.SelfRSSPreRestart = benchkit.ReadRSS()
	if err := restartPhase(ns, cur, res, profile); err != nil {
		return nil, err
	}
	res.SelfHWMKiB = max(hwm, benchkit.ReadHWM())
	if res.NftMaxRSSKiB, err = shimMaxRSS(nftLog); err != nil {
		return nil, err
	}
	return res, nil
}

// incrementalPhases moves one endpoint, then adds one service, changes
// times each, one Sync per change.
func incrementalPhases(ns *netnstest.NS, p *nftables.Proxier, st *desired.State, services, changes int, res *Result) (*desired.State, error) {
	ctx := context.Background()
	cur := st
	for k := 0; k < changes; k++ {
		cur = benchkit.WithEndpointMoved(cur, (k*7919)%services, k)
		next := cur
		s, err := measure(ns, func() error { return p.Sync(ctx, next, proxytest.ModeOf(next)) })
		if err != nil {
			return nil, fmt.Errorf("endpoint change %d: %w", k, err)
		}
		res.EndpointChange = append(res.EndpointChange, s)
	}
	for k := 0; k < changes; k++ {
		cur = benchkit.WithService(cur, benchkit.MakeServicePort(services+k))
		next := cur
		s, err := measure(ns, func() error { return p.Sync(ctx, next, proxytest.ModeOf(next)) })
		if err != nil {
			return nil, fmt.Errorf("service add %d: %w", k, err)
		}
		res.ServiceAdd = append(res.ServiceAdd, s)
	}
	return cur, nil
}

// restartPhase plays a daemon restart: a new Proxier with no memory, the
// same desired state, a full sync — while a netlink monitor records every
// ruleset change the kernel announces. Then it cleans up.
func restartPhase(ns *netnstest.NS, cur *desired.State, res *Result, profile string) error {
	ctx := context.Background()
	mon, err := ns.StartNftMonitor()
	if err != nil {
		return err
	}
	if profile != "" {
		profile += ".restart"
	}
	stop, err := startProfile(profile)
	if err != nil {
		return err
	}
	var p *nftables.Proxier
	res.Restart, err = measure(ns, func() (err error) {
		if p, err = newProxier(); err != nil {
			return err
		}
		if err := p.Init(ctx); err != nil {
			return err
		}
		return p.Sync(ctx, benchkit.FullSync(cur), proxytest.ModeOf(benchkit.FullSync(cur)))
	})
	stop()
	res.SelfHWMRestartKiB = benchkit.ReadHWM()
	res.RestartEvents = countEvents(mon.Stop())
	if err != nil {
		return fmt.Errorf("restart sync: %w", err)
	}
	if err := writeHeapProfile(profile); err != nil {
		return err
	}
	if res.Cleanup, err = measure(ns, func() error { return p.Cleanup(ctx) }); err != nil {
		return fmt.Errorf("cleanup: %w", err)
	}
	p.Close()
	return nil
}

// countEvents counts notifications by kind ("add rule", "delete element").
func countEvents(lines []string) map[string]int {
	counts := map[string]int{}
	for _, l := range lines {
		counts[l]++
	}
	return counts
}

// measure runs fn inside ns and records wall time and the CPU time of this
// process and of the children (nft) it waited for.
func measure(ns *netnstest.NS, fn func() error) (Sample, error) {
	t, err := benchkit.Measure(func() error { return ns.Do(fn) })
	return Sample{
		WallMS:     t.WallMS,
		NftUserMS:  t.ChildUserMS,
		NftSysMS:   t.ChildSysMS,
		SelfUserMS: t.SelfUserMS,
		SelfSysMS:  t.SelfSysMS,
	}, err
}

// startProfile starts a CPU profile into path ("" = none) and returns what
// stops it.
func startProfile(path string) (func(), error) {
	if path == "" {
		return func() {}, nil
	}
	f, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("cpu profile: %w", err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, fmt.Errorf("cpu profile: %w", err)
	}
	return func() { pprof.StopCPUProfile(); f.Close() }, nil
}

// writeHeapProfile writes the heap profile to path.heap ("" writes none).
// It collects first: a profile shows the heap as of the last completed GC,
// which may lie well inside the phase just measured.
func writeHeapProfile(path string) error {
	if path == "" {
		return nil
	}
	runtime.GC()
	f, err := os.Create(path + ".heap")
	if err != nil {
		return fmt.Errorf("heap profile: %w", err)
	}
	defer f.Close()
	if err := pprof.WriteHeapProfile(f); err != nil {
		return fmt.Errorf("heap profile: %w", err)
	}
	return nil
}

// newProxier is the Proxier of the chosen -transport.
func newProxier() (*nftables.Proxier, error) {
	if *transport == "knft" {
		return nftables.New(proxy.IPv4, nftables.Options{})
	}
	if *transport != "knftables" {
		return nil, fmt.Errorf("unknown -transport %q", *transport)
	}
	nft, err := knftables.New(knftables.IPv4Family, nftables.TableName)
	if err != nil {
		return nil, err
	}
	return nftables.NewWithInterface(proxy.IPv4, knft.NewKnftables(nft)), nil
}
