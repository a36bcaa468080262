package nftables

import (
	"slices"
	"strings"
	"testing"

	"github.com/svcproxy/svcproxy/pkg/pipeline/desired"
	"github.com/svcproxy/svcproxy/pkg/testing/netnstest/scenario"
)

// takeOverUpstreamFirewall syncs st over unmarked (the kernel scenario's
// table, svcproxy's layout before markers) as upstream kube-proxy leaves
// it: its firewall-ips verdict map still goes to the firewall chain of the
// load balancer with source ranges. The sync deletes upstream's map before
// its chain, the kernel refusing (EBUSY) to delete a chain while a map
// element names it, and so ends without a cleanup failure, every flow
// right after each transaction, and a restart writes nothing.
func takeOverUpstreamFirewall(t *testing.T, env *scenario.Env, st *desired.State, unmarked string) {
	f := scenario.Families[0]
	upstream := withUpstreamFirewall(t, unmarked, f.LBIP(11).String(), env.FromClient(f).Source.String())
	// One unit per transaction: the monitor tells their order (it calls
	// a map a set).
	txs := upgradeInKernel(t, env, st, upstream)
	mapGone := transactionIndex(txs, "delete set firewall-ips")
	chainGone := transactionIndex(txs, "delete chain "+upstreamFirewallChain)
	if mapGone < 0 || chainGone < mapGone {
		t.Errorf("firewall-ips deleted in transaction %d, the chain it went to in %d: want the map first:\n%q",
			mapGone, chainGone, txs)
	}
	for _, name := range readBackIn(t, env.Node1.NS) {
		if strings.Contains(name, "firewall-ips") || strings.Contains(name, upstreamFirewallChain) {
			t.Errorf("upstream's %s is still in the table", name)
		}
	}
}

// transactionIndex is the index of the first transaction of txs holding
// the notification want, or -1.
func transactionIndex(txs [][]string, want string) int {
	return slices.IndexFunc(txs, func(tx []string) bool { return slices.Contains(tx, want) })
}
