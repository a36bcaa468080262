package backends

import (
	"context"
	"net/netip"
	"testing"

	"github.com/svcproxy/svcproxy/internal/config"
	"github.com/svcproxy/svcproxy/pkg/pipeline/backends/nftables"
	"github.com/svcproxy/svcproxy/pkg/pipeline/desired"
	"github.com/svcproxy/svcproxy/pkg/proxy"
	"github.com/svcproxy/svcproxy/pkg/testing/netnstest"
	"github.com/svcproxy/svcproxy/pkg/testing/netnstest/scenario"
)

// TestKernelKeepNATHooksKeepsConnections: connections nftables mode's
// rules translated through a node port (to node1's pods and, masqueraded,
// to node2's) go on with their endpoint once the rules are gone and only
// what nftables.KeepNATHooks keeps is left. The kernel translates an
// established flow only while it still tracks the family's packets, and
// it tracks them only while some rule or object of the namespace needs
// conntrack: empty nat chains alone do not, and without it the next
// packet of every such flow met the node's own stack, which reset it.
func TestKernelKeepNATHooksKeepsConnections(t *testing.T) {
	netnstest.RequireKernel(t, "nft", "nsenter")
	env := scenario.NewEnv(t)
	ctx := context.Background()
	conns := dialThroughRules(t, env, nftablesBackend)
	expectKept(t, env, false, "with nftables mode's rules")

	if err := env.Node1.NS.Do(func() error { return nftables.KeepNATHooks(ctx, proxy.IPv4) }); err != nil {
		t.Fatal(err)
	}
	expectKept(t, env, true, "after KeepNATHooks")
	askAll(t, conns, "after the rules went, their nat hooks kept")
	closeAll(conns)
}

// expectKept checks what nftables.Kept, which explain asks, says of
// node1's IPv4 table.
func expectKept(t *testing.T, env *scenario.Env, want bool, when string) {
	t.Helper()
	var kept bool
	_ = env.Node1.NS.Do(func() error { kept = nftables.Kept(proxy.IPv4); return nil })
	if kept != want {
		t.Errorf("%s: nftables.Kept(IPv4) = %t, want %t", when, kept, want)
	}
}

// TestKernelEBPFTCFromIPTablesKeepsConnections: ebpf mode with the tc
// programs starts on a node where iptables mode's rules translated
// connections through a node port; after its first sync the daemon
// removes iptables mode's rules (leftovers.OtherModes), and the
// connections go on with their endpoint: the kept IPv4 table, though no
// nftables rules ever ran on the node, keeps the kernel tracking them.
func TestKernelEBPFTCFromIPTablesKeepsConnections(t *testing.T) {
	env, cfg, _ := tcModeEnv(t)
	ctx := context.Background()
	conns := dialThroughRules(t, env, iptablesBackend)

	withTC := openEBPFMode(t, env, cfg)
	t.Cleanup(func() { _ = env.Node1.NS.Do(func() error { return withTC.cleanup(ctx) }) })
	syncAll(t, env, func(o *desired.Options) { ebpfBackend.Decide(cfg, o) }, withTC.sync)
	if err := env.Node1.NS.Do(func() error { return iptablesBackend.RemoveLeftovers(ctx, cfg) }); err != nil {
		t.Fatal(err)
	}
	askAll(t, conns, "iptables → ebpf+tc, iptables mode's rules removed")
	closeAll(conns)
	noIPv4Rules(t, env)
}

// dialThroughRules syncs b's rules (a mode of rules) in node1 and holds
// connections open through node port 30010 from the outside client.
func dialThroughRules(t *testing.T, env *scenario.Env, b Backend) []heldConn {
	t.Helper()
	cfg := &config.Config{Mode: b.Mode}
	syncAll(t, env, func(o *desired.Options) { b.Decide(cfg, o) }, openRulesMode(t, env, b))
	return dialAll(t, env.FromClient(scenario.Families[0]), netip.AddrPortFrom(env.Node1.IPv4, 30010), func(netnstest.Answer) bool { return true })
}
