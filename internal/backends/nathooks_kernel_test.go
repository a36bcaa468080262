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
	cfg := &config.Config{Mode: proxy.ModeNFTables}
	rules := openNFTablesMode(t, env)
	syncAll(t, env, func(o *desired.Options) { nftablesBackend.Decide(cfg, o) }, rules)
	f := scenario.Families[0]
	conns := dialAll(t, env.FromClient(f), netip.AddrPortFrom(env.Node1.IPv4, 30010), func(netnstest.Answer) bool { return true })

	if err := env.Node1.NS.Do(func() error { return nftables.KeepNATHooks(ctx, proxy.IPv4) }); err != nil {
		t.Fatal(err)
	}
	askAll(t, conns, "after the rules went, their nat hooks kept")
	closeAll(conns)
}
