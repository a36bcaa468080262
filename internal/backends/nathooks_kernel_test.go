package backends

import (
	"context"
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
// to node2's), in both families, go on with their endpoint once the rules
// are gone and only what nftables.KeepNATHooks keeps is left. The kernel
// translates an established flow only while it still tracks the family's
// packets, and it tracks them only while some rule or object of the
// namespace needs conntrack (IPv4 and IPv6 count their references apart):
// empty nat chains alone do not, and without it the next packet of every
// such flow met the node's own stack, which reset it.
func TestKernelKeepNATHooksKeepsConnections(t *testing.T) {
	netnstest.RequireKernel(t, "nft", "nsenter")
	env := scenario.NewEnv(t)
	ctx := context.Background()
	conns := dialThroughRules(t, env, nftablesBackend)
	expectKept(t, env, false, "with nftables mode's rules")
	for _, f := range proxy.Families {
		var gone bool
		err := env.Node1.NS.Do(func() (err error) { gone, err = nftables.EmptyKeptNATHooks(ctx, f); return err })
		if err != nil || gone {
			t.Errorf("%s: EmptyKeptNATHooks over nftables mode's rules: emptied %t, %v; want the rules left alone", f, gone, err)
		}
	}
	expectKept(t, env, false, "after EmptyKeptNATHooks over the rules")

	for _, f := range proxy.Families {
		if err := env.Node1.NS.Do(func() error { return nftables.KeepNATHooks(ctx, f) }); err != nil {
			t.Fatal(err)
		}
	}
	expectKept(t, env, true, "after KeepNATHooks")
	askAll(t, conns, "after the rules went, their nat hooks kept")
	closeAll(conns)
}

// expectKept checks what nftables.WithoutRules, which explain asks, says of
// node1's tables.
func expectKept(t *testing.T, env *scenario.Env, want bool, when string) {
	t.Helper()
	for _, f := range proxy.Families {
		var kept bool
		_ = env.Node1.NS.Do(func() error { kept = nftables.WithoutRules(f); return nil })
		if kept != want {
			t.Errorf("%s: nftables.WithoutRules(%s) = %t, want %t", when, f, kept, want)
		}
	}
}

// TestKernelEBPFTCFromIPTablesKeepsConnections: ebpf mode with the tc
// programs starts on a node where iptables mode's rules translated
// connections through a node port, in both families; after its first sync
// the daemon removes iptables mode's rules (leftovers.OtherModes), and the
// connections go on with their endpoint: the kept tables, though no
// nftables rules ever ran on the node, keep the kernel tracking them.
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
	noServiceRules(t, env)
}

// dialThroughRules syncs b's rules (a mode of rules) in node1 and holds
// connections open through node port 30010 from the outside client, in
// both families.
func dialThroughRules(t *testing.T, env *scenario.Env, b Backend) []heldConn {
	t.Helper()
	cfg := &config.Config{Mode: b.Mode}
	syncAll(t, env, func(o *desired.Options) { b.Decide(cfg, o) }, openRulesMode(t, env, b))
	return dialBoth(t, env, anyPath)
}
