package backends

import (
	"context"
	"net/netip"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/vishvananda/netns"

	"github.com/svcproxy/svcproxy/internal/config"
	"github.com/svcproxy/svcproxy/internal/metrics"
	"github.com/svcproxy/svcproxy/pkg/kconntrack"
	"github.com/svcproxy/svcproxy/pkg/pipeline/backends/ebpf/nodeport"
	"github.com/svcproxy/svcproxy/pkg/pipeline/desired"
	"github.com/svcproxy/svcproxy/pkg/proxy"
	"github.com/svcproxy/svcproxy/pkg/testing/netnstest"
	"github.com/svcproxy/svcproxy/pkg/testing/netnstest/scenario"
)

// TestKernelEBPFModeTC: ebpf mode with --bpf-tc-interfaces on node1's
// fabric interface: one tc Proxier serves both families' packets from
// outside the node, and neither family has an nftables half (node1 has no
// rules but the kept tables: noServiceRules). The outside client's IPv4
// and IPv6 TCP and UDP to a node port and an external IP go through the tc
// programs (node1's conntrack has no flow to the frontend). Those of
// externalTrafficPolicy Cluster reach node2's pod from a tc masquerade
// port of node1; node1's pods see the client, as nothing masquerades a
// local endpoint's flow (a documented difference); externalTrafficPolicy
// Local keeps the client's address. The source-ranged LB IP and a node
// port with ClientIP affinity are tc's too (tcSourceRanges, tcAffinity),
// in both families. SCTP from outside nothing translates, in either
// family (a documented difference). Another mode's leftover removal takes
// the tc pins too.
func TestKernelEBPFModeTC(t *testing.T) {
	env, cfg, pins := tcModeEnv(t)
	ctx := context.Background()
	both := openEBPFMode(t, env, cfg)
	t.Cleanup(func() { _ = env.Node1.NS.Do(func() error { return both.cleanup(ctx) }) })
	for _, f := range scenario.Families {
		w := env.NewWorld(f).Configure(func(o *desired.Options) { ebpfBackend.Decide(cfg, o) })
		both.sync(t, env, w.Apply(t, append(env.Services(), stickyExternal)...), proxy.FullSync)
	}
	if both[proxy.IPv4].tc == nil || both[proxy.IPv6].tc != both[proxy.IPv4].tc {
		t.Fatalf("tc programs: IPv4 %v, IPv6 %v; want one Proxier for both", both[proxy.IPv4].tc, both[proxy.IPv6].tc)
	}
	if both[proxy.IPv4].rules != nil || both[proxy.IPv6].rules != nil {
		t.Fatalf("nftables halves: IPv4 %v, IPv6 %v; want none", both[proxy.IPv4].rules, both[proxy.IPv6].rules)
	}
	noServiceRules(t, env)
	for _, f := range scenario.Families {
		client := f.Pick(env.Allowed)
		for i, proto := range scenario.Protocols {
			if proto == proxy.SCTP {
				// The tc programs do not translate SCTP, and no rules
				// do (docs/design/0009-ebpf-without-nftables.md).
				notTranslated(t, env, f, proto, netip.AddrPortFrom(env.Node1.IP(f.V6), uint16(30010+i)))
				continue
			}
			for _, dst := range []netip.AddrPort{
				netip.AddrPortFrom(env.Node1.IP(f.V6), uint16(30010+i)),
				netip.AddrPortFrom(f.ExternalIP(10), scenario.SvcPort),
			} {
				seen := map[string]int{}
				for _, ans := range scenario.AskAll(t, env.FromClient(f), proto, dst, 12) {
					seen[ans.Server]++
					if !tcMasqueraded(env, ans, client) {
						t.Errorf("%s %s → %s saw %v, want a node1 pod to see the client, another node's pod node1 from a tc masquerade port", proto, dst, ans.Server, ans.Peer)
					}
				}
				notByRules(t, env, proto, dst)
				t.Logf("%s to %s: %v", proto, dst, seen)
			}
		}
	}
	for _, f := range scenario.Families {
		tcLocalPolicy(t, env, f)
		tcSourceRanges(t, env, f)
		tcAffinity(t, env, f)
	}

	stopEBPFMode(both)
	removeCfg := &config.Config{Mode: proxy.ModeNFTables, BPFPinDir: pins}
	if err := env.Node1.NS.Do(func() error { return ebpfBackend.RemoveLeftovers(ctx, removeCfg) }); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(pins, "tc")); !os.IsNotExist(err) {
		t.Errorf("after removing the leftovers the tc pins remain (%v)", err)
	}
}

// TestKernelEBPFModeWithoutTCDetachesIt: ebpf mode started without
// --bpf-tc-interfaces after a start with it drains the tc programs, as a
// switch to another mode does: connections they translated, in both
// families, are kept and not reset, new connections go to the rules at
// once, and once the translated ones closed the programs are off the
// interface and their pins gone; the node port is the rules' again. The
// drain waits for every family's rules: after IPv4's first sync alone the
// tc programs still serve IPv6's new connections, which IPv6's table
// (kept, without rules) would not translate.
func TestKernelEBPFModeWithoutTCDetachesIt(t *testing.T) {
	env, cfg, pins := tcModeEnv(t)
	ctx := context.Background()
	decide := func(o *desired.Options) { ebpfBackend.Decide(cfg, o) }
	withTC := openEBPFMode(t, env, cfg)
	t.Cleanup(func() { _ = env.Node1.NS.Do(func() error { return withTC.cleanup(ctx) }) })
	syncAll(t, env, decide, withTC.sync)
	byTC := dialBoth(t, env, byTCFrom(env))
	for _, b := range withTC {
		b.hooks.Close()
		if b.tc != nil {
			b.tc.Close()
		}
	}

	without := *cfg
	without.BPFTCInterfaces = nil
	again := openEBPFMode(t, env, &without)
	v4, v6 := scenario.Families[0], scenario.Families[1]
	again.sync(t, env, env.NewWorld(v4).Configure(decide).Apply(t, env.Services()...), proxy.FullSync)
	client6 := env.FromClient(v6)
	closeAll(dialAll(t, client6, nodePort(env, v6), byTCFrom(env)(client6)))
	again.sync(t, env, env.NewWorld(v6).Configure(decide).Apply(t, env.Services()...), proxy.FullSync)
	if n := tcPrograms(t, env); n != 2 {
		t.Errorf("after a start without the flag, connections through the tc programs open: %d tc programs on fab0, want 2", n)
	}
	askAll(t, byTC, "after a start without the flag")
	byRules := dialBoth(t, env, func(c netnstest.Client) func(netnstest.Answer) bool {
		return func(ans netnstest.Answer) bool { return ans.Peer.Addr() != c.Source }
	})
	for _, f := range scenario.Families {
		notByTC(t, env, nodePort(env, f))
	}
	closeAll(byTC)
	closed := time.Now()
	for tcPrograms(t, env) != 0 {
		if time.Since(closed) > time.Minute {
			t.Fatal("the tc programs still attached a minute after the connections they translated closed")
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Logf("the tc programs removed %v after the connections they held closed", time.Since(closed).Round(time.Millisecond))
	for wait := time.Now(); ; time.Sleep(100 * time.Millisecond) {
		_, err := os.Stat(filepath.Join(pins, "tc"))
		if os.IsNotExist(err) {
			break
		}
		if time.Since(wait) > 10*time.Second {
			t.Fatalf("the tc programs are off fab0 but their pins remain (%v)", err)
		}
	}
	askAll(t, byRules, "after the tc programs' removal")
	closeAll(byRules)
}

// tcPrograms counts the programs at fab0's TCX hooks in node1.
func tcPrograms(t *testing.T, env *scenario.Env) int {
	t.Helper()
	n, err := env.Node1.NS.TCXPrograms("fab0")
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// tcModeEnv is the scenario's environment with its pods in a throwaway
// cgroup, and ebpf mode's configuration with the tc programs on node1's
// fabric interface; pins is the bpffs they pin in.
func tcModeEnv(t *testing.T) (env *scenario.Env, cfg *config.Config, pins string) {
	t.Helper()
	netnstest.RequireKernel(t, "nft", "nsenter")
	cgroup, pins := netnstest.ThrowawayCgroup(t, "svcproxy-ebpftc-test"), netnstest.MountThrowaway(t, "bpf")
	cfg = &config.Config{Mode: proxy.ModeEBPF, BPFCgroupRoot: cgroup, BPFPinDir: pins, BPFTCInterfaces: []string{"fab0"}}
	env = scenario.NewEnv(t)
	env.PodsInCgroup(cgroup)
	return env, cfg, pins
}

// stickyExternal is the scenario's sticky Service with a node port: its
// external frontends have ClientIP affinity.
var stickyExternal = scenario.Spec{Name: "sticky-external", Slot: 23, NodePort: 30060, Affinity: 10800,
	Endpoints: []scenario.EPSpec{{Pod: "pod-a"}, {Pod: "pod-b"}, {Pod: "pod-c"}}}

// tcMasqueraded says whether the endpoint that answered saw what tc's
// path shows it of an externalTrafficPolicy Cluster flow from client: a
// node1 pod, the client (nothing masquerades a local endpoint's flow);
// another node's pod, node1's address from a tc masquerade port.
func tcMasqueraded(env *scenario.Env, ans netnstest.Answer, client netip.Addr) bool {
	pod := env.Pods[ans.Server]
	if pod != nil && pod.Node == env.Node1 {
		return ans.Peer.Addr() == client
	}
	return ans.Peer.Addr() == env.Node1.IP(client.Is6()) && nodeport.MasqueradePort(ans.Peer.Port())
}

// notByRules checks that node1's conntrack holds no flow to dst: the tc
// program translated the packets before netfilter saw them, so no rule
// did.
func notByRules(t *testing.T, env *scenario.Env, proto proxy.Protocol, dst netip.AddrPort) {
	t.Helper()
	if byRules, err := rulesFlows(env, proto, dst); err != nil || len(byRules) > 0 {
		t.Errorf("%s to %s: node1's conntrack holds flows to the frontend (the rules translated them, not tc): %v (%v)", proto, dst, byRules, err)
	}
}

// rulesFlows lists the flows to dst in node1's conntrack: those the rules
// translated.
func rulesFlows(env *scenario.Env, proto proxy.Protocol, dst netip.AddrPort) ([]kconntrack.Flow, error) {
	return node1Flows(env, dst.Addr().Is6(), func(fl kconntrack.Flow) bool {
		return fl.Proto == kconntrack.ProtoNumber(proto) && fl.Orig.Dst == dst
	})
}

// node1Flows lists the flows of an IP family (IPv6 when v6) in node1's
// conntrack that keep says to.
func node1Flows(env *scenario.Env, v6 bool, keep func(kconntrack.Flow) bool) ([]kconntrack.Flow, error) {
	ct, err := node1Conntrack(env)
	if err != nil {
		return nil, err
	}
	defer ct.Close()
	family := proxy.IPv4
	if v6 {
		family = proxy.IPv6
	}
	var out []kconntrack.Flow
	err = ct.List(context.Background(), family, func(fl kconntrack.Flow) {
		if keep(fl) {
			out = append(out, fl)
		}
	})
	return out, err
}

// node1Conntrack opens a conntrack client in node1's network namespace.
func node1Conntrack(env *scenario.Env) (*kconntrack.Client, error) {
	h, err := netns.GetFromPath(env.Node1.NS.Path())
	if err != nil {
		return nil, err
	}
	defer h.Close()
	return kconntrack.NewAt(h)
}

// tcLocalPolicy: the externalTrafficPolicy Local node port is served at tc
// and keeps the client's address.
func tcLocalPolicy(t *testing.T, env *scenario.Env, f scenario.Fam) {
	client := f.Pick(env.Allowed)
	for i, proto := range []proxy.Protocol{proxy.TCP, proxy.UDP} {
		dst := netip.AddrPortFrom(env.Node1.IP(f.V6), uint16(30030+i))
		for _, ans := range scenario.AskAll(t, env.FromClient(f), proto, dst, 4) {
			if ans.Server != "pod-a" || ans.Peer.Addr() != client {
				t.Errorf("%s to the externalTrafficPolicy Local node port %s: %v, want pod-a seeing the client %s", proto, dst, ans, client)
			}
		}
		notByRules(t, env, proto, dst)
	}
}

// tcSourceRanges: the scenario's source-ranged LB IP of family f is served at
// tc: the allowed client reaches pod-a, the denied client's
// TCP and UDP are dropped, and its connection to the same Service's node
// port is served.
func tcSourceRanges(t *testing.T, env *scenario.Env, f scenario.Fam) {
	lb := netip.AddrPortFrom(f.LBIP(11), scenario.SvcPort)
	for _, proto := range []proxy.Protocol{proxy.TCP, proxy.UDP} {
		if ans, err := env.FromClient(f).Ask(proto, lb); err != nil || !tcMasqueraded(env, ans, f.Pick(env.Allowed)) {
			t.Errorf("allowed client %s to the source-ranged LB IP %s: %v, %v; want pod-a (on node1) seeing the client", proto, lb, ans, err)
		}
		notByRules(t, env, proto, lb)
	}
	denied := netnstest.Client{NS: env.Client, Source: f.Pick(env.Denied), Timeout: scenario.DropTimeout}
	for _, proto := range []proxy.Protocol{proxy.TCP, proxy.UDP} {
		if _, err := denied.Ask(proto, lb); netnstest.OutcomeOf(err) != netnstest.Timeout {
			t.Errorf("denied client %s to the source-ranged LB IP: %v, want dropped", proto, err)
		}
	}
	np := netip.AddrPortFrom(env.Node1.IP(f.V6), 30020)
	if ans, err := denied.Ask(proxy.TCP, np); err != nil || !tcMasqueraded(env, ans, denied.Source) {
		t.Errorf("denied client to the same Service's node port %s: %v, %v; want served as externalTrafficPolicy Cluster", np, ans, err)
	}
	notByRules(t, env, proxy.TCP, np)
}

// tcAffinity: the affinity node port is served at tc (masqueraded, as
// externalTrafficPolicy Cluster) and every connection of a client reaches
// one endpoint.
func tcAffinity(t *testing.T, env *scenario.Env, f scenario.Fam) {
	for i, proto := range []proxy.Protocol{proxy.TCP, proxy.UDP} {
		dst := netip.AddrPortFrom(env.Node1.IP(f.V6), uint16(30060+i))
		seen := map[string]int{}
		for _, ans := range scenario.AskAll(t, env.FromClient(f), proto, dst, 20) {
			seen[ans.Server]++
			if !tcMasqueraded(env, ans, f.Pick(env.Allowed)) {
				t.Errorf("%s to the affinity node port %s: %s saw %v, want node1", proto, dst, ans.Server, ans.Peer)
			}
		}
		notByRules(t, env, proto, dst)
		if len(seen) != 1 {
			t.Errorf("%s to the affinity node port %s: 20 connections reached %v, want one endpoint", proto, dst, seen)
		}
	}
}

// tcFlowsDeleted is the IPv4 value of svcproxy_ebpf_tc_flows_deleted_total
// among the families the instance's metrics options register, and whether
// it is there.
func tcFlowsDeleted(t *testing.T, inst *Instance) (float64, bool) {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	if err := metrics.Register(reg, proxy.ModeEBPF, append(inst.Metrics, metrics.WithoutRuntimeCollectors())...); err != nil {
		t.Fatal(err)
	}
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range families {
		if mf.GetName() != "svcproxy_ebpf_tc_flows_deleted_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == metrics.LabelIPFamily && l.GetValue() == string(proxy.IPv4) {
					return m.GetCounter().GetValue(), true
				}
			}
		}
	}
	return 0, false
}

// notTranslated checks that the outside client's proto to dst is not
// served: nothing on node1 translates it, and node1 itself does not
// listen there.
func notTranslated(t *testing.T, env *scenario.Env, f scenario.Fam, proto proxy.Protocol, dst netip.AddrPort) {
	t.Helper()
	c := env.FromClient(f)
	c.Timeout = scenario.DropTimeout
	if ans, err := c.Ask(proto, dst); err == nil {
		t.Errorf("%s %s from outside the node: answered by %s, want not translated", proto, dst, ans.Server)
	}
}
