package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"time"

	"github.com/svcproxy/svcproxy/pkg/kiptables"
	"github.com/svcproxy/svcproxy/pkg/pipeline/backends/iptables"
	"github.com/svcproxy/svcproxy/pkg/pipeline/desired"
	"github.com/svcproxy/svcproxy/pkg/proxy"
	"github.com/svcproxy/svcproxy/pkg/testing/netnstest"
	"github.com/svcproxy/svcproxy/pkg/testing/proxytest"
	"github.com/svcproxy/svcproxy/test/bench/internal/benchkit"
)

// Sample is one timed operation. Child* is the CPU time of the iptables
// processes it ran; Self* is this process's own (rendering, diffing); Ops
// splits the wall and child time by kind of iptables call, so what is left
// of the wall time is svcproxy's own work.
type Sample struct {
	WallMS      float64           `json:"wall_ms"`
	ChildUserMS float64           `json:"child_user_ms"`
	ChildSysMS  float64           `json:"child_sys_ms"`
	SelfUserMS  float64           `json:"self_user_ms"`
	SelfSysMS   float64           `json:"self_sys_ms"`
	Ops         map[string]OpStat `json:"ops"`
}

// Result is everything one child measures for one flavour at one scale.
type Result struct {
	Flavour        string   `json:"flavour"`
	Services       int      `json:"services"`
	Endpoints      int      `json:"endpoints"`
	BuildMS        float64  `json:"build_ms"`
	Cold           Sample   `json:"cold"`
	EndpointChange []Sample `json:"endpoint_change"`
	Restart        Sample   `json:"restart"` // New + Init + full Sync of the unchanged state
	Cleanup        Sample   `json:"cleanup"`
	Rules          int      `json:"rules"`          // "-A" lines after the cold sync, all tables
	ColdDigest     string   `json:"cold_digest"`    // rules after the cold sync (see rulesDigest)
	BeforeRestart  string   `json:"before_restart"` // rules before the restart
	AfterRestart   string   `json:"after_restart"`  // rules after it
	SelfHWMColdKiB int64    `json:"self_hwm_cold_kib"`
	SelfHWMKiB     int64    `json:"self_hwm_kib"`
	// ChildMaxRSSColdKiB is the largest iptables child of the cold sync
	// (iptables-restore); ChildMaxRSSKiB that of the whole run, which also
	// counts the iptables-save runs of the restart's sweep and of the
	// digests.
	ChildMaxRSSColdKiB int64 `json:"child_maxrss_cold_kib"`
	ChildMaxRSSKiB     int64 `json:"child_maxrss_kib"`
}

// bench is one child's run: a fresh namespace, one flavour, one scale.
type bench struct {
	ctx     context.Context // ends at the child's deadline; cancelling kills iptables-restore
	ns      *netnstest.NS
	flavour kiptables.Flavour
	res     *Result
	heap    *heapProfiler // nil unless -heapprofile
}

// runChild measures one flavour at one scale inside a fresh network
// namespace of its own; deleting the namespace at the end removes every
// rule, whatever happens. At the deadline the running iptables tool is
// killed and runChild returns an error, so the namespace is still deleted.
func runChild(ctx context.Context, flavour kiptables.Flavour, services, changes int, heap *heapProfiler) (*Result, error) {
	ns, deleteNS, err := benchkit.Namespace()
	if err != nil {
		return nil, err
	}
	defer deleteNS()
	b := &bench{ctx: ctx, ns: ns, flavour: flavour, heap: heap,
		res: &Result{Flavour: string(flavour), Services: services, Endpoints: services * benchkit.EndpointsPerService}}
	start := time.Now()
	st, err := benchkit.BuildState(services, benchkit.NodeIP)
	if err != nil {
		return nil, err
	}
	b.res.BuildMS = benchkit.MS(time.Since(start))

	b.heap.setPhase("cold")
	p, ipt, err := b.newProxier()
	if err != nil {
		return nil, err
	}
	if b.res.Cold, err = b.measure(ipt, func(ctx context.Context) error { return p.Sync(ctx, st, proxytest.ModeOf(st)) }); err != nil {
		return nil, fmt.Errorf("cold sync: %w", err)
	}
	b.res.SelfHWMColdKiB = benchkit.ReadHWM()
	b.res.ChildMaxRSSColdKiB = benchkit.ChildrenMaxRSS()
	if b.res.ColdDigest, b.res.Rules, err = b.digest(); err != nil {
		return nil, err
	}
	b.heap.setPhase("change")
	cur, err := b.endpointChanges(p, ipt, st, services, changes)
	if err != nil {
		return nil, err
	}
	b.heap.setPhase("restart")
	if err := b.restart(cur); err != nil {
		return nil, err
	}
	b.res.SelfHWMKiB = benchkit.ReadHWM()
	b.res.ChildMaxRSSKiB = benchkit.ChildrenMaxRSS()
	return b.res, nil
}

// newProxier builds a Proxier on the flavour's real tools, with every call
// timed, and runs Init, all inside the namespace.
func (b *bench) newProxier() (*iptables.Proxier, *timedIPT, error) {
	var p *iptables.Proxier
	var ipt *timedIPT
	err := b.ns.Do(func() error {
		client, err := kiptables.New(proxy.IPv4, b.flavour)
		if err != nil {
			return err
		}
		ipt = newTimedIPT(client, b.heap)
		// syncPeriod's default: in large-cluster mode the stale-chain
		// sweep (an iptables-save) runs at most this often.
		p = iptables.NewWithInterface(proxy.IPv4, ipt, iptables.Options{Flavour: b.flavour, SyncPeriod: 30 * time.Second})
		return p.Init(b.ctx)
	})
	return p, ipt, err
}

// endpointChanges moves one endpoint of a different service per change,
// one (partial) Sync each.
func (b *bench) endpointChanges(p *iptables.Proxier, ipt *timedIPT, st *desired.State, services, changes int) (*desired.State, error) {
	cur := st
	for k := 0; k < changes; k++ {
		cur = benchkit.WithEndpointMoved(cur, (k*7919)%services, k)
		next := cur
		s, err := b.measure(ipt, func(ctx context.Context) error { return p.Sync(ctx, next, proxytest.ModeOf(next)) })
		if err != nil {
			return nil, fmt.Errorf("endpoint change %d: %w", k, err)
		}
		b.res.EndpointChange = append(b.res.EndpointChange, s)
	}
	return cur, nil
}

// restart plays a daemon restart: a new Proxier with no memory, the same
// desired state, a full sync; the rules before and after are digested to
// show nothing changed. Then it cleans up.
func (b *bench) restart(cur *desired.State) error {
	var err error
	if b.res.BeforeRestart, _, err = b.digest(); err != nil {
		return err
	}
	var p *iptables.Proxier
	b.res.Restart, err = b.measureWithSetup(func() (*timedIPT, error) {
		var ipt *timedIPT
		p, ipt, err = b.newProxier()
		return ipt, err
	}, func(ctx context.Context) error {
		return p.Sync(ctx, benchkit.FullSync(cur), proxytest.ModeOf(benchkit.FullSync(cur)))
	})
	if err != nil {
		return fmt.Errorf("restart: %w", err)
	}
	if b.res.AfterRestart, _, err = b.digest(); err != nil {
		return err
	}
	if b.res.Cleanup, err = b.measure(nil, func(ctx context.Context) error { return p.Cleanup(ctx) }); err != nil {
		return fmt.Errorf("cleanup: %w", err)
	}
	return nil
}

// digest saves every table we write with the flavour's iptables-save, one
// table at a time in a fixed order: a whole-ruleset save lists the tables
// in a flavour-specific order (nft: creation order), which is not a
// difference in rules. The output is digested as it is read: held whole,
// the nat table (~40 MB at 10k services) would count in this process's
// peak RSS, which is meant to be svcproxy's.
func (b *bench) digest() (string, int, error) {
	d := newRulesDigest()
	for _, t := range []kiptables.Table{kiptables.TableMangle, kiptables.TableNAT, kiptables.TableFilter} {
		if err := b.ns.Do(func() error { return b.saveInto(d, t) }); err != nil {
			return "", 0, err
		}
	}
	digest, n := d.sum()
	return digest, n, nil
}

// saveInto runs iptables-save for table (in the current namespace) and
// feeds its lines to d.
func (b *bench) saveInto(d *rulesDigest, t kiptables.Table) error {
	cmd := exec.CommandContext(b.ctx, "iptables-"+string(b.flavour)+"-save", "-t", string(t))
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return err
	}
	sc := bufio.NewScanner(out)
	sc.Buffer(make([]byte, 64*1024), 1<<20)
	for sc.Scan() {
		d.line(sc.Bytes())
	}
	scanErr := sc.Err()
	if err := cmd.Wait(); err != nil {
		return fmt.Errorf("%s: %w: %s", cmd, err, stderr.String())
	}
	return scanErr
}

// measure runs fn inside the namespace and records wall time, the CPU of
// this process and of its iptables children, and ipt's calls (nil: none).
func (b *bench) measure(ipt *timedIPT, fn func(ctx context.Context) error) (Sample, error) {
	return b.measureWithSetup(func() (*timedIPT, error) { return ipt, nil }, fn)
}

// measureWithSetup also times setup (run first, inside the namespace),
// which returns the client whose calls to record.
func (b *bench) measureWithSetup(setup func() (*timedIPT, error), fn func(ctx context.Context) error) (Sample, error) {
	var ipt *timedIPT
	times, err := benchkit.Measure(func() (err error) {
		if ipt, err = setup(); err != nil {
			return err
		}
		return b.ns.Do(func() error { return fn(b.ctx) })
	})
	s := Sample{
		WallMS:      times.WallMS,
		ChildUserMS: times.ChildUserMS,
		ChildSysMS:  times.ChildSysMS,
		SelfUserMS:  times.SelfUserMS,
		SelfSysMS:   times.SelfSysMS,
	}
	if ipt != nil {
		s.Ops = ipt.take()
	}
	return s, err
}
