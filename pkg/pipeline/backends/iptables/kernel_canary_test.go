package iptables_test

import (
	"context"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/svcproxy/svcproxy/pkg/pipeline/backends/iptables"
	"github.com/svcproxy/svcproxy/pkg/pipeline/desired"
	"github.com/svcproxy/svcproxy/pkg/proxy"
	"github.com/svcproxy/svcproxy/pkg/testing/netnstest"
	"github.com/svcproxy/svcproxy/pkg/testing/netnstest/scenario"
)

// canaryPeriod stands in for syncPeriod (30 s by default): the canary
// monitor below checks this often.
const canaryPeriod = 400 * time.Millisecond

// scenarioClusterIP is the cluster IP and port of "spread", the Service
// with every endpoint.
func scenarioClusterIP(f scenario.Fam) netip.AddrPort {
	return netip.AddrPortFrom(f.ClusterIP(10), scenario.SvcPort)
}

// canaryRestores plays a firewalld reload: everything is flushed and every
// user chain deleted from outside, in all tables of both families. Traffic
// stops. A canary monitor like the syncer's (pkg/pipeline/syncer watchCanary:
// CanaryMissing every syncPeriod, then a recovery sync) must bring every
// rule back at its first check. The sync it triggers is handed a State
// that changes nothing, so only the recovery mode can make it whole.
func (k *kernel) canaryRestores(t *testing.T) {
	ns := k.env.Node1.NS
	before := map[proxy.IPFamily]string{}
	for _, f := range proxy.Families {
		before[f] = save(t, ns, f, k.flavour)
		missing, err := canaryMissing(ns, k.proxiers[f])
		if err != nil || missing {
			t.Fatalf("%s: CanaryMissing on intact rules = %t, %v", f, missing, err)
		}
	}
	k.flushLikeFirewalld(t)
	v4 := scenario.Families[0]
	c := k.env.FromClient(v4)
	c.Timeout = scenario.DropTimeout
	if ans, err := c.Ask(proxy.TCP, scenarioClusterIP(v4)); err == nil {
		t.Fatalf("cluster IP answered after the flush (%v); the test would prove nothing", ans)
	}

	mon := k.startCanaryMonitor()
	// A bound on waiting, not a timing target: on a loaded 2-core machine
	// the recovery's iptables-nft-restore alone can take many seconds.
	restored := waitFor(time.Minute, func() bool {
		for _, f := range proxy.Families {
			if save(t, ns, f, k.flavour) != before[f] {
				return false
			}
		}
		return true
	})
	checks := mon.stop()
	if !restored {
		for _, f := range proxy.Families {
			t.Errorf("%s rules not restored:\n%s", f, diffLines(before[f], save(t, ns, f, k.flavour)))
		}
	}
	for _, f := range proxy.Families {
		first, ok := checks[f]
		switch {
		case !ok:
			t.Errorf("%s: the monitor never checked the canary", f)
		case first.err != nil:
			t.Errorf("%s: first canary check or its sync failed: %v", f, first.err)
		case !first.missing:
			t.Errorf("%s: the first canary check after the flush saw the canary; want missing", f)
		default:
			t.Logf("%s: rules back %v after the monitor started (period %v)", f, first.restoredAfter, canaryPeriod)
		}
	}
	for _, f := range scenario.Families {
		if got := scenario.Servers(scenario.AskMany(t, k.env.FromClient(f), proxy.TCP, scenarioClusterIP(f), 20)); len(got) < 2 {
			t.Errorf("%s cluster IP after the canary resync reached %v, want balancing", f.Family, got)
		}
	}
}

// flushLikeFirewalld flushes every chain and deletes every user chain in
// every table we use, with the node's own tools.
func (k *kernel) flushLikeFirewalld(t *testing.T) {
	for _, f := range proxy.Families {
		for _, table := range tables {
			for _, op := range []string{"-F", "-X"} {
				if _, err := k.env.Node1.NS.Run(context.Background(), tool(f, k.flavour), "-t", string(table), op); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
}

func canaryMissing(ns *netnstest.NS, p *iptables.Proxier) (missing bool, err error) {
	err = ns.Do(func() (err error) {
		missing, err = p.CanaryMissing(context.Background())
		return err
	})
	return missing, err
}

// canaryCheck is the outcome of the monitor's first check of one family.
type canaryCheck struct {
	missing       bool
	err           error
	restoredAfter time.Duration // from the monitor's start to the end of the resync
}

// canaryMonitor is the syncer's canary loop for both families, recording
// the first check of each.
type canaryMonitor struct {
	cancel context.CancelFunc
	done   sync.WaitGroup
	mu     sync.Mutex
	first  map[proxy.IPFamily]canaryCheck
}

func (k *kernel) startCanaryMonitor() *canaryMonitor {
	ctx, cancel := context.WithCancel(context.Background())
	m := &canaryMonitor{cancel: cancel, first: map[proxy.IPFamily]canaryCheck{}}
	start := time.Now()
	for _, f := range proxy.Families {
		p := k.proxiers[f]
		// Nothing changed since the last sync: Changed is empty, not nil.
		unchanged := *k.worlds[f].State()
		unchanged.Changed = map[proxy.ServicePortName]struct{}{}
		m.done.Add(1)
		go func() {
			defer m.done.Done()
			ticker := time.NewTicker(canaryPeriod)
			defer ticker.Stop()
			for {
				select {
				case <-ctx.Done():
					return
				case <-ticker.C:
				}
				m.check(f, k.env.Node1.NS, p, &unchanged, start)
			}
		}()
	}
	return m
}

func (m *canaryMonitor) check(f proxy.IPFamily, ns *netnstest.NS, p *iptables.Proxier, st *desired.State, start time.Time) {
	missing, err := canaryMissing(ns, p)
	if err == nil && missing {
		err = ns.Do(func() error { return p.Sync(context.Background(), st, proxy.RecoverySync) })
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, seen := m.first[f]; !seen {
		m.first[f] = canaryCheck{missing: missing, err: err, restoredAfter: time.Since(start)}
	}
}

// stop ends the loops and returns each family's first check.
func (m *canaryMonitor) stop() map[proxy.IPFamily]canaryCheck {
	m.cancel()
	m.done.Wait()
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.first
}

// waitFor polls cond until it holds or the limit passes.
func waitFor(limit time.Duration, cond func() bool) bool {
	for deadline := time.Now().Add(limit); ; time.Sleep(100 * time.Millisecond) {
		if cond() {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
	}
}

// TestKernelCanaryMissing: with both flavours and families, the canary
// poll reads the three canaries with one tool run, and tells the loss of
// any one of them.
func TestKernelCanaryMissing(t *testing.T) {
	requireKernel(t)
	execs := netnstest.RecordExecs(t, netnstest.ProxyTools()...)
	ctx := context.Background()
	for _, fl := range flavours {
		for _, f := range proxy.Families {
			t.Run(string(fl)+"/"+string(f), func(t *testing.T) {
				ns := freshNS(t)
				var p *iptables.Proxier
				err := ns.Do(func() (err error) {
					if p, err = iptables.New(ctx, f, iptables.Options{Flavour: fl}); err != nil {
						return err
					}
					return p.Sync(ctx, &desired.State{Family: f}, proxy.RecoverySync)
				})
				if err != nil {
					t.Fatal(err)
				}
				poll := func(want bool) {
					t.Helper()
					var missing bool
					ran := execs.Runs(t, ns, func() (err error) {
						missing, err = p.CanaryMissing(ctx)
						return err
					})
					if missing != want || len(ran) != 1 {
						t.Errorf("CanaryMissing = %t with %d tool runs, want %t with 1: %q", missing, len(ran), want, ran)
					}
				}
				poll(false)
				for _, table := range tables {
					for _, op := range []string{"-X", "-N"} {
						if _, err := ns.Run(ctx, tool(f, fl), "-t", string(table), op, "KUBE-PROXY-CANARY"); err != nil {
							t.Fatal(err)
						}
						poll(op == "-X")
					}
				}
			})
		}
	}
}
