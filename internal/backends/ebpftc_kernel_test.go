package backends

import (
	"context"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/svcproxy/svcproxy/internal/config"
	"github.com/svcproxy/svcproxy/pkg/netnstest"
	"github.com/svcproxy/svcproxy/pkg/netnstest/scenario"
	"github.com/svcproxy/svcproxy/pkg/proxy"
	"github.com/svcproxy/svcproxy/pkg/proxy/desired"
)

// TestKernelEBPFModeTC: ebpf mode with --bpf-tc-interfaces on node1's
// fabric interface, both halves and the tc programs given each family's
// State. The outside client's IPv4 TCP and UDP to a node port and an
// external IP go through the tc programs, and the nftables rules of the
// same frontends, still in place, do not also act on them: node1's pods
// see the client's own address (the tc programs masquerade only what
// leaves for another node; the rules masquerade every externalTrafficPolicy
// Cluster connection), node2's pod sees node1 from a tc masquerade port.
// The source-ranged LB IP and a node port with ClientIP affinity are tc's
// too (tcSourceRanges, tcAffinity). What tc does not serve, IPv6 and
// SCTP, the rules still serve, masqueraded. Another mode's leftover
// removal takes the tc pins too.
func TestKernelEBPFModeTC(t *testing.T) {
	env, cfg, pins := tcModeEnv(t)
	ctx := context.Background()
	both := openEBPFMode(t, env, cfg)
	t.Cleanup(func() { _ = env.Node1.NS.Do(func() error { return both.cleanup(ctx) }) })
	for _, f := range scenario.Families {
		w := env.NewWorld(f).Configure(func(o *desired.Options) { ebpfBackend.Decide(cfg, o) })
		both.sync(t, env, w.Apply(t, append(env.Services(), stickyExternal)...), proxy.FullSync)
	}
	if both[proxy.IPv4].tc == nil || both[proxy.IPv6].tc != nil {
		t.Fatalf("tc programs: IPv4 %v, IPv6 %v; want IPv4's only", both[proxy.IPv4].tc, both[proxy.IPv6].tc)
	}
	local := map[string]bool{"pod-a": true, "pod-b": true, "pod-c": true}
	for _, f := range scenario.Families {
		client := f.Pick(env.Allowed)
		for i, proto := range scenario.Protocols {
			byTC := !f.V6 && proto != proxy.SCTP
			for _, dst := range []netip.AddrPort{
				netip.AddrPortFrom(env.Node1.IP(f.V6), uint16(30010+i)),
				netip.AddrPortFrom(f.ExternalIP(10), scenario.SvcPort),
			} {
				seen := map[string]int{}
				for _, ans := range scenario.AskAll(t, env.FromClient(f), proto, dst, 12) {
					seen[ans.Server]++
					kept := ans.Peer.Addr() == client
					switch {
					case byTC && kept != local[ans.Server]:
						t.Errorf("%s %s → %s saw %v: the tc path keeps the source for node1's pods alone", proto, dst, ans.Server, ans.Peer)
					case byTC && !kept && (ans.Peer.Addr() != env.Node1.IPv4 || ans.Peer.Port() < 61000):
						t.Errorf("%s %s → %s saw %v, want node1 from a tc masquerade port", proto, dst, ans.Server, ans.Peer)
					case !byTC && kept:
						t.Errorf("%s %s → %s saw the client: the rules masquerade externalTrafficPolicy Cluster", proto, dst, ans.Server)
					}
				}
				t.Logf("%s to %s (tc: %t): %v", proto, dst, byTC, seen)
			}
		}
	}
	tcSourceRanges(t, env)
	tcAffinity(t, env)
	out, err := env.Node1.NS.Run(ctx, "nft", "list", "table", "ip", "kube-proxy")
	if err != nil || !strings.Contains(string(out), "30010") {
		t.Errorf("the nftables half's IPv4 table lost its node-port rules (%v):\n%s", err, out)
	}

	for _, b := range both {
		b.hooks.Close()
		if b.tc != nil {
			b.tc.Close()
		}
	}
	if err := ebpfBackend.RemoveLeftovers(ctx, &config.Config{Mode: proxy.ModeNFTables, BPFPinDir: pins}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(pins, "tc")); !os.IsNotExist(err) {
		t.Errorf("after removing the leftovers the tc pins remain (%v)", err)
	}
}

// TestKernelEBPFModeWithoutTCDetachesIt: ebpf mode started without
// --bpf-tc-interfaces after a start with it takes the tc programs off the
// interface and removes their pins; the node port is the rules' again.
func TestKernelEBPFModeWithoutTCDetachesIt(t *testing.T) {
	env, cfg, pins := tcModeEnv(t)
	ctx := context.Background()
	f := scenario.Families[0]
	withTC := openEBPFMode(t, env, cfg)
	t.Cleanup(func() { _ = env.Node1.NS.Do(func() error { return withTC.cleanup(ctx) }) })
	st := env.NewWorld(f).Configure(func(o *desired.Options) { ebpfBackend.Decide(cfg, o) }).Apply(t, env.Services()...)
	withTC.sync(t, env, st, proxy.FullSync)
	for _, b := range withTC {
		b.hooks.Close()
		if b.tc != nil {
			b.tc.Close()
		}
	}
	if n := tcPrograms(t, env); n != 2 {
		t.Fatalf("after a start with the flag: %d tc programs on fab0, want 2", n)
	}

	without := *cfg
	without.BPFTCInterfaces = nil
	again := openEBPFMode(t, env, &without)
	again.sync(t, env, st, proxy.FullSync)
	if n := tcPrograms(t, env); n != 0 {
		t.Errorf("after a start without the flag: %d tc programs on fab0, want 0", n)
	}
	if _, err := os.Stat(filepath.Join(pins, "tc")); !os.IsNotExist(err) {
		t.Errorf("after a start without the flag the tc pins remain (%v)", err)
	}
	dst := netip.AddrPortFrom(env.Node1.IPv4, 30010)
	for _, ans := range scenario.AskAll(t, env.FromClient(f), proxy.TCP, dst, 4) {
		if ans.Peer.Addr() == f.Pick(env.Allowed) {
			t.Errorf("TCP %s → %s saw the client: the rules masquerade externalTrafficPolicy Cluster", dst, ans.Server)
		}
	}
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

// tcSourceRanges: the scenario's source-ranged LB IP (IPv4) is served at
// tc: the allowed client reaches pod-a with its own address (the rules
// would masquerade it), the denied client's TCP and UDP are dropped, and
// its connection to the same Service's node port is served.
func tcSourceRanges(t *testing.T, env *scenario.Env) {
	f := scenario.Families[0]
	client := f.Pick(env.Allowed)
	lb := netip.AddrPortFrom(f.LBIP(11), scenario.SvcPort)
	for _, proto := range []proxy.Protocol{proxy.TCP, proxy.UDP} {
		if ans, err := env.FromClient(f).Ask(proto, lb); err != nil || ans.Peer.Addr() != client {
			t.Errorf("allowed client %s to the source-ranged LB IP %s: %v, %v; want pod-a seeing %s (tc)", proto, lb, ans, err, client)
		}
	}
	denied := netnstest.Client{NS: env.Client, Source: f.Pick(env.Denied), Timeout: scenario.DropTimeout}
	for _, proto := range []proxy.Protocol{proxy.TCP, proxy.UDP} {
		if _, err := denied.Ask(proto, lb); netnstest.OutcomeOf(err) != netnstest.Timeout {
			t.Errorf("denied client %s to the source-ranged LB IP: %v, want dropped", proto, err)
		}
	}
	np := netip.AddrPortFrom(env.Node1.IPv4, 30020)
	if ans, err := denied.Ask(proxy.TCP, np); err != nil || ans.Peer.Addr() != denied.Source {
		t.Errorf("denied client to the same Service's node port %s: %v, %v; want served by tc", np, ans, err)
	}
}

// tcAffinity: the affinity node port is served at tc (node1's pods see
// the client's address) and every connection of a client reaches one
// endpoint.
func tcAffinity(t *testing.T, env *scenario.Env) {
	f := scenario.Families[0]
	client := f.Pick(env.Allowed)
	for i, proto := range []proxy.Protocol{proxy.TCP, proxy.UDP} {
		dst := netip.AddrPortFrom(env.Node1.IPv4, uint16(30060+i))
		seen, peers := map[string]int{}, map[netip.Addr]int{}
		for _, ans := range scenario.AskAll(t, env.FromClient(f), proto, dst, 20) {
			seen[ans.Server]++
			peers[ans.Peer.Addr()]++
		}
		if peers[client] != 20 {
			t.Errorf("%s to the affinity node port %s: the endpoints saw %v, want the client each time (tc)", proto, dst, peers)
		}
		if len(seen) != 1 {
			t.Errorf("%s to the affinity node port %s: 20 connections reached %v, want one endpoint", proto, dst, seen)
		}
	}
}
