package backends

import (
	"context"
	"net/netip"
	"os"
	"path/filepath"
	"testing"

	"github.com/svcproxy/svcproxy/internal/config"
	"github.com/svcproxy/svcproxy/pkg/pipeline/desired"
	"github.com/svcproxy/svcproxy/pkg/proxy"
	"github.com/svcproxy/svcproxy/pkg/testing/netnstest"
	"github.com/svcproxy/svcproxy/pkg/testing/netnstest/scenario"
)

// switchConns is how many connections each direction of the switch holds
// open through node1's node port: enough that both a node1 pod and
// node2's pod serve some of them.
const switchConns = 16

// TestKernelEBPFTCModeSwitchKeepsConnections: TCP connections open through
// a node port, in both families, across a switch of mode, both ways, keep
// their endpoint and are not reset. From ebpf mode with the tc programs to
// nftables mode: the tc programs translated the connections before
// netfilter saw them, so the kernel's conntrack has no state that would
// keep them; the tc programs stay attached (their frontends gone once the
// row's StopNewConnections returns, before any removal: new connections
// go to the rules) until the connections they translated have ended, and
// only then are removed; a removal cut short before that leaves them for
// the next one. From nftables mode back to ebpf mode with the tc programs:
// the rules' connections go on through the kernel's conntrack (the kept
// tables of both families), the new ones through tc.
func TestKernelEBPFTCModeSwitchKeepsConnections(t *testing.T) {
	env, cfg, pins := tcModeEnv(t)
	ctx := context.Background()
	nftCfg := &config.Config{Mode: proxy.ModeNFTables, BPFPinDir: pins}

	byTC := connectedByTC(t, env, cfg)

	// nftables mode starts, syncs, and then removes ebpf mode's leftovers,
	// the tc programs first taking no new connection: from then on the
	// rules take them, while the programs still carry theirs.
	rules := openRulesMode(t, env, nftablesBackend)
	syncAll(t, env, func(o *desired.Options) { nftablesBackend.Decide(nftCfg, o) }, rules)
	if err := ebpfBackend.StopNewConnections(ctx, nftCfg); err != nil {
		t.Fatal(err)
	}
	if n, err := tcFrontends(pins); err != nil || n != 0 {
		t.Fatalf("once ebpf mode's row stopped the tc programs taking new connections, they still had %d frontends (%v)", n, err)
	}
	byRules := dialBoth(t, env, anyPath)
	for _, f := range scenario.Families {
		notByTCAfterDrainBegun(t, env, pins, nodePort(env, f), byRules)
	}
	askAll(t, byTC, "ebpf+tc → nftables, the tc programs taking no new connection")
	// A removal cut short (the new mode's process stopped) takes the
	// socket hooks and leaves the tc programs for the next start.
	cut, cancel := context.WithCancel(ctx)
	cancel()
	if err := env.Node1.NS.Do(func() error { return ebpfBackend.RemoveLeftovers(cut, nftCfg) }); err == nil {
		t.Error("a removal of ebpf mode's leftovers cut short while connections were open reported no error")
	}
	if _, err := os.Stat(filepath.Join(pins, "ipv4")); !os.IsNotExist(err) {
		t.Errorf("after a removal cut short the socket hooks' pins remain (%v)", err)
	}
	if n := tcPrograms(t, env); n != 2 {
		t.Errorf("after a removal cut short: %d tc programs on fab0, want 2", n)
	}
	removed := make(chan error, 1)
	go func() { removed <- env.Node1.NS.Do(func() error { return ebpfBackend.RemoveLeftovers(ctx, nftCfg) }) }()
	askAll(t, byTC, "ebpf+tc → nftables, the removal waiting")
	askAll(t, byRules, "ebpf+tc → nftables, the removal waiting")
	tcRemovedAfterClose(t, removed, byTC, func() string {
		return tcDrainReport(env, pins, nodePort(env, scenario.Families[0]), connLabels(map[string][]heldConn{"byTC": byTC, "byRules": byRules}))
	})
	if _, err := os.Stat(filepath.Join(pins, "tc")); !os.IsNotExist(err) {
		t.Errorf("after the removal of ebpf mode's leftovers the tc pins remain (%v)", err)
	}
	if n := tcPrograms(t, env); n != 0 {
		t.Errorf("after the removal of ebpf mode's leftovers: %d tc programs on fab0, want 0", n)
	}
	askAll(t, byRules, "nftables after the removal")

	// Back to ebpf mode with the tc programs.
	again := openEBPFMode(t, env, cfg)
	syncAll(t, env, func(o *desired.Options) { ebpfBackend.Decide(cfg, o) }, again.sync)
	askAll(t, byRules, "nftables → ebpf+tc")
	closeAll(byRules)
	closeAll(dialBoth(t, env, byTCFrom(env)))
}

// connectedByTC runs ebpf mode with the tc programs (cfg) in node1, syncs
// both families, opens connections through the programs (dialBoth) and
// stops the mode as a stopped svcproxy leaves it: only the pins hold the
// programs.
func connectedByTC(t *testing.T, env *scenario.Env, cfg *config.Config) []heldConn {
	t.Helper()
	withTC := openEBPFMode(t, env, cfg)
	t.Cleanup(func() { _ = env.Node1.NS.Do(func() error { return withTC.cleanup(context.Background()) }) })
	syncAll(t, env, func(o *desired.Options) { ebpfBackend.Decide(cfg, o) }, withTC.sync)
	byTC := dialBoth(t, env, byTCFrom(env))
	for _, b := range withTC {
		b.hooks.Close()
		if b.tc != nil {
			b.tc.Close()
		}
	}
	return byTC
}

// nodePort is node1's node port 30010 in family f.
func nodePort(env *scenario.Env, f scenario.Fam) netip.AddrPort {
	return netip.AddrPortFrom(env.Node1.IP(f.V6), 30010)
}

// dialBoth opens switchConns connections to nodePort from the outside
// client in each family (dialAll), each answer satisfying what want
// makes of the client.
func dialBoth(t *testing.T, env *scenario.Env, want func(netnstest.Client) func(netnstest.Answer) bool) []heldConn {
	t.Helper()
	var out []heldConn
	for _, f := range scenario.Families {
		c := env.FromClient(f)
		out = append(out, dialAll(t, c, nodePort(env, f), want(c))...)
	}
	return out
}

// byTCFrom wants an answer the tc programs translated (tcMasqueraded).
func byTCFrom(env *scenario.Env) func(netnstest.Client) func(netnstest.Answer) bool {
	return func(c netnstest.Client) func(netnstest.Answer) bool {
		return func(ans netnstest.Answer) bool { return tcMasqueraded(env, ans, c.Source) }
	}
}

// anyPath takes every answer.
func anyPath(netnstest.Client) func(netnstest.Answer) bool {
	return func(netnstest.Answer) bool { return true }
}

// stateSync hands a State to the Proxier of its family.
type stateSync func(t *testing.T, env *scenario.Env, st *desired.State, mode proxy.SyncMode)

// syncAll syncs both families' States of the scenario's Services, decided
// with configure, through sync.
func syncAll(t *testing.T, env *scenario.Env, configure func(*desired.Options), sync stateSync) {
	t.Helper()
	for _, f := range scenario.Families {
		sync(t, env, env.NewWorld(f).Configure(configure).Apply(t, env.Services()...), proxy.FullSync)
	}
}

// openRulesMode opens b's row (a mode of rules: nftables, iptables) for
// both families in node1 and returns its sync; the row is closed at the
// end of the test.
func openRulesMode(t *testing.T, env *scenario.Env, b Backend) stateSync {
	t.Helper()
	return openMode(t, env, b, false)
}

// openMode opens b's row for both families in node1, with initFirst also
// its Proxiers' Init, as the daemon does before their first sync, and
// returns its sync; the row is closed at the end of the test.
func openMode(t *testing.T, env *scenario.Env, b Backend, initFirst bool) stateSync {
	t.Helper()
	var inst *Instance
	err := env.Node1.NS.Do(func() (err error) {
		inst, err = b.Open(context.Background(), Env{Config: &config.Config{Mode: b.Mode},
			Families: []proxy.IPFamily{proxy.IPv4, proxy.IPv6}})
		if err != nil || !initFirst {
			return err
		}
		for _, r := range inst.Proxiers {
			if err := r.Proxier.Init(context.Background()); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(inst.Close)
	return func(t *testing.T, env *scenario.Env, st *desired.State, mode proxy.SyncMode) {
		t.Helper()
		err := env.Node1.NS.Do(func() error { return inst.Proxiers[st.Family].Proxier.Sync(context.Background(), st, mode) })
		if err != nil {
			t.Fatalf("%s mode: %s %s sync: %v", b.Mode, st.Family, mode, err)
		}
	}
}

// heldConn is a connection held open and the endpoint that answered it.
type heldConn struct {
	conn   *netnstest.Conn
	server string
}

// dialAll opens switchConns connections to dst and asks once on each; every
// answer must satisfy want (which path translated it).
func dialAll(t *testing.T, c netnstest.Client, dst netip.AddrPort, want func(netnstest.Answer) bool) []heldConn {
	t.Helper()
	var out []heldConn
	seen := map[string]int{}
	for range switchConns {
		conn, err := c.DialTCP(dst)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = conn.Close() })
		ans, err := conn.Ask()
		if err != nil {
			t.Fatalf("TCP %s from %s: %v", dst, conn.LocalAddr(), err)
		}
		if !want(ans) {
			t.Fatalf("TCP %s from %s: %v, not by the path expected", dst, conn.LocalAddr(), ans)
		}
		seen[ans.Server]++
		out = append(out, heldConn{conn: conn, server: ans.Server})
	}
	t.Logf("%d connections to %s: %v", switchConns, dst, seen)
	return out
}

// askAll asks again on each held connection, which must be answered by the
// endpoint that answered it first.
func askAll(t *testing.T, conns []heldConn, when string) {
	t.Helper()
	for _, h := range conns {
		ans, err := h.conn.Ask()
		if err != nil || ans.Server != h.server {
			t.Errorf("%s: the connection from %s to %s: %v, %v; want kept", when, h.conn.LocalAddr(), h.server, ans, err)
		}
	}
}

func closeAll(conns []heldConn) {
	for _, h := range conns {
		_ = h.conn.Close()
	}
}

// notByTC checks that node1's conntrack holds flows to dst: the rules
// translated them, the tc programs let them pass.
func notByTC(t *testing.T, env *scenario.Env, dst netip.AddrPort) {
	t.Helper()
	if byRules, err := rulesFlows(env, proxy.TCP, dst); err != nil || len(byRules) == 0 {
		t.Errorf("TCP to %s: no flow to the frontend in node1's conntrack (%v): the tc programs translated new connections", dst, err)
	}
}
