package nftables

import (
	"os"
	"strings"
	"testing"

	"sigs.k8s.io/knftables"

	"github.com/svcproxy/svcproxy/pkg/pipeline/desired"
	"github.com/svcproxy/svcproxy/pkg/proxy"
	"github.com/svcproxy/svcproxy/pkg/testing/proxytest"
)

// The layout before the base chains and the firewall guard set took the
// shapes upstream's first sync accepts: filter base chains at dstnat-10
// (filter-prerouting, filter-input, filter-forward, filter-output) and
// filter-output-post-dnat at dstnat+10, and the guard set named
// "firewall-ips", upstream's name for a verdict map. A node upgrading
// from it must end with exactly what a fresh sync writes, every flow
// right after each transaction.
const previousLayoutDump = "testdata/upgrade-from-upstream-incompatible-layout-ipv4.dump"

// TestUpgradeFromUpstreamIncompatibleLayout syncs over that table one unit
// per transaction: the filter chains whose priority changes are deleted and
// added again in one unit (the kernel cannot move a base chain), the
// firewall check turns to the new guard set only once it is complete, and
// the old chains and set go only after that.
func TestUpgradeFromUpstreamIncompatibleLayout(t *testing.T) {
	old, err := os.ReadFile(previousLayoutDump)
	if err != nil {
		t.Fatal(err)
	}
	fake := newStrictFake(knftables.IPv4Family)
	if err := fake.ParseDump(string(old)); err != nil {
		t.Fatal(err)
	}
	c := caseNamed(t, "loadBalancerSourceRanges")
	st := proxytest.BuildState(t, c, proxy.IPv4)
	checkFlows(t, fake, c, st, "previous layout")
	fake.afterRun = func() { checkFlows(t, fake, c, st, "mid-upgrade") }
	syncUnitByUnit(t, fake, st)
	fake.afterRun = nil
	// A restart over the upgraded table writes nothing.
	if stats := mustSync(t, NewWithInterface(proxy.IPv4, fakeKernel(fake)), st); stats.Operations != 0 {
		t.Errorf("restart after the upgrade sent %d operations, want 0:\n%s", stats.Operations, fake.LastTransaction)
	}
}

// A base chain at another priority than render's is deleted and added
// again in one transaction, never changed in place: the kernel refuses
// that (EOPNOTSUPP), and the strict fake does as well.
func TestBaseChainMovedInOneTransaction(t *testing.T) {
	st := caseState(t, "cluster IP", proxy.IPv4)
	fake := syncFake(t, st)
	tx := fake.NewTransaction()
	moved := &knftables.Chain{Name: chainFilterForward, Type: knftables.PtrTo(knftables.FilterType),
		Hook: knftables.PtrTo(knftables.ForwardHook), Priority: knftables.PtrTo(knftables.DNATPriority + "-10")}
	tx.Delete(&knftables.Chain{Name: chainFilterForward})
	tx.Add(moved)
	tx.Add(&knftables.Rule{Chain: chainFilterForward, Rule: "ct state new jump " + chainClusterIPsCheck,
		Comment: knftables.PtrTo(ruleID("ct state new jump " + chainClusterIPsCheck))})
	if err := fake.Fake.Run(t.Context(), tx); err != nil {
		t.Fatal(err)
	}
	mustSync(t, NewWithInterface(proxy.IPv4, fakeKernel(fake)), st)
	last := fake.LastTransaction.String()
	for _, want := range []string{"delete chain ip kube-proxy filter-forward", "add chain ip kube-proxy filter-forward { type filter hook forward priority 0 ; }"} {
		if !strings.Contains(last, want) {
			t.Errorf("the repair has no %q:\n%s", want, last)
		}
	}
	if got, _ := knftables.ParsePriority(knftables.IPv4Family, string(*fake.Table.Chains[chainFilterForward].Priority)); got != 0 {
		t.Errorf("filter-forward at priority %d after the repair, want 0 (filter)", got)
	}
}

// syncUnitByUnit syncs st over the table in fake one unit per
// transaction, as a large upgrade is split, and checks that the table ends
// as a fresh sync of st leaves it.
func syncUnitByUnit(t *testing.T, fake *strictFake, st *desired.State) {
	t.Helper()
	p := NewWithInterface(st.Family, fakeKernel(fake))
	p.maxOps = 1
	mustSync(t, p, st)
	ref := newStrictFake(specFor(st.Family).family)
	mustSync(t, NewWithInterface(st.Family, fakeKernel(ref)), st)
	if got, want := sortedDump(fake), sortedDump(ref); got != want {
		t.Errorf("upgraded table differs from a fresh sync:\n%s", lineDiff(want, got))
	}
}
