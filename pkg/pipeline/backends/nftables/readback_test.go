package nftables

import (
	"context"
	"strconv"
	"testing"

	"sigs.k8s.io/knftables"

	"github.com/svcproxy/svcproxy/pkg/pipeline/desired"
	"github.com/svcproxy/svcproxy/pkg/proxy"
	"github.com/svcproxy/svcproxy/pkg/testing/proxytest"
)

// TestFailureRereadsTheTable: an element deleted behind the Proxier's back
// makes the transaction that deletes it fail; the next sync must read the
// table again instead of retrying the same failing delete forever.
func TestFailureRereadsTheTable(t *testing.T) {
	st := caseState(t, "cluster IP", proxy.IPv4)
	fake := newStrictFake(knftables.IPv4Family)
	p := NewWithInterface(proxy.IPv4, fakeKernel(fake))
	mustSync(t, p, st)
	name := anyService(t, st, 1)
	changed := withChange(st, name, func(sp *desired.ServicePort) { sp.Internal.Endpoints = nil })

	// Delete, behind its back, the frontend element the change replaces.
	sp := st.Service(name)
	key := []string{addrString(sp.ClusterIP), protoName(sp.Protocol), strconv.Itoa(int(sp.Port))}
	tx := fake.NewTransaction()
	tx.Delete(&knftables.Element{Map: mapServiceIPs, Key: key})
	if err := fake.Run(context.Background(), tx); err != nil {
		t.Fatal(err)
	}
	if err := p.Sync(context.Background(), changed, proxytest.ModeOf(changed)); err == nil {
		t.Fatalf("deleting an element that is gone did not fail; the test needs a fake that refuses it:\n%s", fake.LastTransaction)
	}
	again := *changed
	again.Changed = map[proxy.ServicePortName]struct{}{}
	mustSyncIn(t, p, &again, proxy.RecoverySync) // the syncer's answer to a failure
	ref := newStrictFake(knftables.IPv4Family)
	mustSync(t, NewWithInterface(proxy.IPv4, fakeKernel(ref)), &again)
	if sortedDump(fake) != sortedDump(ref) {
		t.Error("sync after the failure did not converge")
	}
}
