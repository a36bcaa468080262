package backends

import (
	"context"
	"errors"
	"net/netip"
	"os/exec"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/svcproxy/svcproxy/internal/config"
	"github.com/svcproxy/svcproxy/internal/metrics"
	"github.com/svcproxy/svcproxy/pkg/pipeline/backends/ebpf"
	"github.com/svcproxy/svcproxy/pkg/pipeline/desired"
	"github.com/svcproxy/svcproxy/pkg/proxy"
	"github.com/svcproxy/svcproxy/pkg/testing/netnstest"
	"github.com/svcproxy/svcproxy/pkg/testing/netnstest/scenario"
)

// TestKernelEBPFMode runs the kernel scenario in ebpf mode: the mode's
// row opened on node1 of the scenario cluster as the daemon opens it,
// attached only to a cgroup this test creates, pinned only in a bpffs it
// mounts, and given each family's State every sync in both halves. node1's
// pods' clients run in the cgroup, so their connections are translated at
// connect; the outside client's go through the nftables half (node ports,
// external and LB IPs, cluster IPs routed to the node). Every scenario
// case runs, hostile Services included; then a restart writes nothing
// into the maps and keeps connections; with the nftables table deleted, a
// process in the cgroup still reaches a cluster IP while one outside does
// not, and the canary says so; another mode's removal of the leftovers in
// the configured pin directory detaches the hooks.
func TestKernelEBPFMode(t *testing.T) {
	netnstest.RequireKernel(t, "nft", "nsenter")
	if _, err := ebpfBackend.Check(nil); err != nil {
		t.Fatalf("this kernel cannot run ebpf mode: %v", err)
	}
	cgroup, pins := netnstest.ThrowawayCgroup(t, "svcproxy-ebpfmode-test"), netnstest.MountThrowaway(t, "bpf")
	cfg := &config.Config{Mode: proxy.ModeEBPF, BPFCgroupRoot: cgroup, BPFPinDir: pins}
	env := scenario.NewEnv(t)
	env.PodsInCgroup(cgroup)
	ctx := context.Background()
	both := openEBPFMode(t, env, cfg)
	t.Cleanup(func() { _ = env.Node1.NS.Do(func() error { return both.cleanup(ctx) }) })
	worlds := map[proxy.IPFamily]*scenario.World{}
	for _, f := range scenario.Families {
		worlds[f.Family] = env.NewWorld(f).Configure(func(o *desired.Options) { ebpfBackend.Decide(cfg, o) })
		// The hostile Services go in with the others: none may stop the sync.
		st := worlds[f.Family].Apply(t, append(env.Services(), env.HostileServices()...)...)
		both.sync(t, env, st, proxy.FullSync)
		// IPv4 also attaches three programs at IPv6 hooks, for IPv4-mapped
		// destinations.
		links := map[proxy.IPFamily]int{proxy.IPv4: 7, proxy.IPv6: 4}[f.Family]
		if s := both[f.Family].hooks.Stats(); s == nil || s.Links != links || s.Entries["services"] == 0 || s.Capacity["backends"] == 0 || s.Writes == 0 {
			t.Errorf("after a sync the %s hooks' stats are %+v, want %d links, entries and writes", f.Family, s, links)
		}
		// After a sync the row says the kernel holds every port, so that a
		// rejected sync after a restart searches without dropping them.
		// Asking reads the kernel back, which only a recovery sync follows
		// in the syncer: so here too.
		var held map[proxy.ServicePortName]struct{}
		err := env.Node1.NS.Do(func() (err error) { held, err = both[f.Family].HeldPorts(ctx, st); return err })
		if err != nil || len(held) != st.Services.Len() {
			t.Errorf("%s HeldPorts after a sync: %d of %d ports (err %v), want all", f.Family, len(held), st.Services.Len(), err)
		}
		both.sync(t, env, st, proxy.RecoverySync)
	}
	for _, f := range scenario.Families {
		t.Run(string(f.Family), func(t *testing.T) {
			env.TrafficCases(t, f)
			t.Run("Hostile", func(t *testing.T) { env.HostileCases(t, f) })
			env.EndpointRemoved(t, f, worlds[f.Family], func(t *testing.T, st *desired.State) {
				both.sync(t, env, st, proxy.PartialSync)
			})
		})
	}
	revNATMetrics(t, both)
	t.Run("RestartWritesNothing", func(t *testing.T) {
		v4, v6 := scenario.Families[0], scenario.Families[1]
		env.KeepsConnection(t, v4, func() {
			env.KeepsConnection(t, v6, func() { both = restartEBPFMode(t, env, cfg, both, worlds) })
		})
	})

	t.Run("HooksWithoutRules", func(t *testing.T) { hooksWithoutRules(t, env, both, pins) })
}

// hooksWithoutRules: with node1's IPv4 nftables table deleted, a process
// in the cgroup still reaches a cluster IP (the hooks translated it at
// connect) while one outside does not, and the canary says so; another
// mode's removal of the leftovers in the pin directory detaches the hooks.
func hooksWithoutRules(t *testing.T, env *scenario.Env, both modeProxiers, pins string) {
	ctx := context.Background()
	f := scenario.Families[0]
	vip := netip.AddrPortFrom(f.ClusterIP(10), scenario.SvcPort) // "spread": pod-a, pod-b, pod-c, pod-r
	inCgroup := env.FromPod("pod-c")
	if ans, err := inCgroup.Ask(proxy.TCP, vip); err != nil {
		t.Fatalf("a process in the cgroup could not reach %s: %v (%s)", vip, err, ans)
	}
	if err := env.Node1.NS.Do(func() error { return exec.Command("nft", "delete", "table", "ip", "kube-proxy").Run() }); err != nil {
		t.Fatal(err)
	}
	if ans, err := inCgroup.Ask(proxy.TCP, vip); err != nil {
		t.Errorf("without the nftables rules, a process in the cgroup could not reach %s: %v (%s)", vip, err, ans)
	}
	outside := netnstest.Client{NS: env.Pods["pod-c"].NS, Timeout: time.Second}
	if ans, err := outside.Ask(proxy.TCP, vip); err == nil {
		t.Errorf("without the nftables rules, a process outside the cgroup reached %s (%s): the test proves nothing", vip, ans)
	}
	if missing, err := both[f.Family].CanaryMissing(ctx); err != nil || !missing {
		t.Errorf("with the nftables table gone, CanaryMissing = %v, %v; want true", missing, err)
	}

	if present, err := ebpf.LeftoversPresent(pins); err != nil || !present {
		t.Fatalf("LeftoversPresent(%s) = %v, %v while the hooks are pinned", pins, present, err)
	}
	for _, b := range both {
		b.hooks.Close() // as a stopped svcproxy: only the pins hold the hooks
	}
	// What another mode's start, or --cleanup, runs with --bpf-pin-dir.
	if err := ebpfBackend.RemoveLeftovers(ctx, &config.Config{Mode: proxy.ModeNFTables, BPFPinDir: pins}); err != nil {
		t.Fatal(err)
	}
	if present, err := ebpf.LeftoversPresent(pins); err != nil || present {
		t.Errorf("after removing the leftovers, LeftoversPresent = %v, %v", present, err)
	}
	inCgroup.Timeout = time.Second
	if ans, err := inCgroup.Ask(proxy.TCP, vip); err == nil {
		t.Errorf("after removing the leftovers a process in the cgroup still reached %s (%s)", vip, ans)
	}
}

// modeProxiers are ebpf mode's per-family Proxiers of one opened row.
type modeProxiers map[proxy.IPFamily]*hooksAndRules

// openEBPFMode opens ebpf mode's row for both families in node1, as the
// daemon does, and inits it; the row is closed at the end of the test.
func openEBPFMode(t *testing.T, env *scenario.Env, cfg *config.Config) modeProxiers {
	t.Helper()
	ctx := context.Background()
	out := modeProxiers{}
	err := env.Node1.NS.Do(func() error {
		inst, err := openEBPF(ctx, Env{Config: cfg, Families: []proxy.IPFamily{proxy.IPv4, proxy.IPv6}})
		if err != nil {
			return err
		}
		t.Cleanup(inst.Close)
		for f, b := range inst.Proxiers {
			out[f] = b.Proxier.(*hooksAndRules)
			if sf := inst.StaleFlows[f]; len(sf) == 0 || sf[0].Table != out[f].hooks.Sockets() {
				t.Errorf("the row hands the %s conntrack cleanup %+v, want the hooks' sockets", f, inst.StaleFlows[f])
			}
			if sf := inst.StaleFlows[f]; out[f].tc != nil && (len(sf) != 2 || sf[1].Name != "ebpf tc flows") {
				t.Errorf("the row hands the %s conntrack cleanup %+v, want the tc programs' flows second", f, sf)
			}
			if err := out[f].Init(ctx); err != nil {
				return err
			}
		}
		if n, ok := tcFlowsDeleted(t, inst); ok != (out[proxy.IPv4].tc != nil) || n != 0 {
			t.Errorf("svcproxy_ebpf_tc_flows_deleted_total: %v (served: %t), want 0 exactly when the tc programs run", n, ok)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// sync hands st to its family's Proxier in node1.
func (m modeProxiers) sync(t *testing.T, env *scenario.Env, st *desired.State, mode proxy.SyncMode) {
	t.Helper()
	if err := env.Node1.NS.Do(func() error { return m[st.Family].Sync(context.Background(), st, mode) }); err != nil {
		t.Fatalf("%s %s sync: %v", st.Family, mode, err)
	}
}

func (m modeProxiers) cleanup(ctx context.Context) error {
	var errs []error
	for _, b := range m {
		errs = append(errs, b.Cleanup(ctx))
	}
	return errors.Join(errs...)
}

// restartEBPFMode stops the hooks of old as a stopped svcproxy leaves them
// (pinned, attached), opens the row again and, as a restarted daemon does,
// prepares it (the row's read-back, which the syncer runs while the lists
// arrive) and syncs each world's State fully: the maps already hold it, so
// nothing is written; every scenario check still passes.
func restartEBPFMode(t *testing.T, env *scenario.Env, cfg *config.Config, old modeProxiers, worlds map[proxy.IPFamily]*scenario.World) modeProxiers {
	t.Helper()
	for _, b := range old {
		b.hooks.Close()
	}
	restarted := openEBPFMode(t, env, cfg)
	for _, f := range scenario.Families {
		full := *worlds[f.Family].State()
		full.Changed = nil
		if err := env.Node1.NS.Do(func() error { return restarted[f.Family].ReadBack(context.Background()) }); err != nil {
			t.Fatalf("%s: preparing the restarted row: %v", f.Family, err)
		}
		restarted.sync(t, env, &full, proxy.FullSync)
		if n := restarted[f.Family].hooks.Writes(); n != 0 {
			t.Errorf("%s: a restart with the same State wrote %d map entries, want 0", f.Family, n)
		}
		if s := restarted[f.Family].hooks.Stats(); s == nil || s.Writes != 0 {
			t.Errorf("%s: after an unchanged restart the published stats are %+v, want 0 writes", f.Family, s)
		}
		t.Run(string(f.Family), func(t *testing.T) { env.ReachableCases(t, f) })
	}
	return restarted
}

// revNATMetrics checks that a scrape reports each family's revnat map: its
// default capacity, and the sockets the traffic cases' clients had
// translated.
func revNATMetrics(t *testing.T, both modeProxiers) {
	t.Helper()
	hooks := map[proxy.IPFamily]*ebpf.Proxier{}
	for f, b := range both {
		hooks[f] = b.hooks
	}
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(newEBPFCollector(hooks))
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, mf := range families {
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["map"] == "revnat" {
				got[mf.GetName()+" "+labels[metrics.LabelIPFamily]] = m.GetGauge().GetValue()
			}
		}
	}
	for f := range both {
		capacity, entries := got["svcproxy_ebpf_map_capacity "+string(f)], got["svcproxy_ebpf_map_entries "+string(f)]
		t.Logf("%s: %v translated sockets remembered of %v", f, entries, capacity)
		if capacity != ebpf.DefaultSocketEntries || entries == 0 || entries > capacity {
			t.Errorf("%s revnat metrics: %v entries of %v, want some of %d", f, entries, capacity, ebpf.DefaultSocketEntries)
		}
	}
}
