package main

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"runtime/pprof"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/svcproxy/svcproxy/internal/netnstest"
	"github.com/svcproxy/svcproxy/pkg/proxy"
	"github.com/svcproxy/svcproxy/pkg/proxy/desired"
	"github.com/svcproxy/svcproxy/pkg/proxy/nftables"
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
	NftMaxRSSKiB   int64          `json:"nft_maxrss_kib"`
}

// runChild measures one scale inside a fresh network namespace of its own.
// The whole namespace (and with it every kernel object) is deleted at the
// end, whatever happens.
func runChild(services, changes int, profile string) (*Result, error) {
	lab, err := netnstest.NewLab()
	if err != nil {
		return nil, err
	}
	defer lab.Close()
	ns, err := lab.NewNS("bench")
	if err != nil {
		return nil, err
	}
	res := &Result{Services: services, Endpoints: services * endpointsPerService}

	start := time.Now()
	st, err := buildState(services)
	if err != nil {
		return nil, err
	}
	res.BuildMS = ms(time.Since(start))

	ctx := context.Background()
	var p *nftables.Proxier
	if res.Init, err = measure(ns, func() (err error) {
		if p, err = nftables.New(proxy.IPv4); err != nil {
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
	res.Cold, err = measure(ns, func() error { return p.Sync(ctx, st) })
	stop()
	if err != nil {
		return nil, fmt.Errorf("cold sync: %w", err)
	}
	res.SelfHWMColdKiB = readHWM()

	cur, err := incrementalPhases(ns, p, st, services, changes, res)
	if err != nil {
		return nil, err
	}
	if err := restartPhase(ns, cur, res); err != nil {
		return nil, err
	}
	res.SelfHWMKiB = readHWM()
	return res, nil
}

// incrementalPhases moves one endpoint, then adds one service, changes
// times each, one Sync per change.
func incrementalPhases(ns *netnstest.NS, p *nftables.Proxier, st *desired.State, services, changes int, res *Result) (*desired.State, error) {
	ctx := context.Background()
	cur := st
	for k := 0; k < changes; k++ {
		cur = withEndpointMoved(cur, (k*7919)%services, k)
		next := cur
		s, err := measure(ns, func() error { return p.Sync(ctx, next) })
		if err != nil {
			return nil, fmt.Errorf("endpoint change %d: %w", k, err)
		}
		res.EndpointChange = append(res.EndpointChange, s)
	}
	for k := 0; k < changes; k++ {
		cur = withService(cur, makeServicePort(services+k))
		next := cur
		s, err := measure(ns, func() error { return p.Sync(ctx, next) })
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
func restartPhase(ns *netnstest.NS, cur *desired.State, res *Result) error {
	ctx := context.Background()
	mon, err := ns.StartNftMonitor()
	if err != nil {
		return err
	}
	var p *nftables.Proxier
	res.Restart, err = measure(ns, func() (err error) {
		if p, err = nftables.New(proxy.IPv4); err != nil {
			return err
		}
		if err := p.Init(ctx); err != nil {
			return err
		}
		return p.Sync(ctx, fullSync(cur))
	})
	res.NftMaxRSSKiB = childrenMaxRSS()
	res.RestartEvents = countEvents(mon.Stop())
	if err != nil {
		return fmt.Errorf("restart sync: %w", err)
	}
	if res.Cleanup, err = measure(ns, func() error { return p.Cleanup(ctx) }); err != nil {
		return fmt.Errorf("cleanup: %w", err)
	}
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
	self0, kids0 := rusage(syscall.RUSAGE_SELF), rusage(syscall.RUSAGE_CHILDREN)
	start := time.Now()
	err := ns.Do(fn)
	wall := time.Since(start)
	self1, kids1 := rusage(syscall.RUSAGE_SELF), rusage(syscall.RUSAGE_CHILDREN)
	return Sample{
		WallMS:     ms(wall),
		NftUserMS:  ms(tv(kids1.Utime) - tv(kids0.Utime)),
		NftSysMS:   ms(tv(kids1.Stime) - tv(kids0.Stime)),
		SelfUserMS: ms(tv(self1.Utime) - tv(self0.Utime)),
		SelfSysMS:  ms(tv(self1.Stime) - tv(self0.Stime)),
	}, err
}

func rusage(who int) syscall.Rusage {
	var ru syscall.Rusage
	_ = syscall.Getrusage(who, &ru)
	return ru
}

func tv(t syscall.Timeval) time.Duration { return time.Duration(t.Nano()) }

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// childrenMaxRSS is the largest resident set of any waited-for child, KiB.
func childrenMaxRSS() int64 { return rusage(syscall.RUSAGE_CHILDREN).Maxrss }

// readHWM returns this process's peak resident set (VmHWM), KiB.
func readHWM() int64 {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return -1
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		if rest, ok := strings.CutPrefix(s.Text(), "VmHWM:"); ok {
			v, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			if err != nil {
				return -1
			}
			return v
		}
	}
	return -1
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
