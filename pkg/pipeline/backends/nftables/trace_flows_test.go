package nftables

import (
	"context"
	"fmt"
	"testing"

	"sigs.k8s.io/knftables"

	"github.com/svcproxy/svcproxy/pkg/pipeline/desired"
	"github.com/svcproxy/svcproxy/pkg/proxy"
	"github.com/svcproxy/svcproxy/pkg/testing/proxytest"
)

// syncFake programs state into a fresh fake and returns it.
func syncFake(t *testing.T, state *desired.State) *strictFake {
	t.Helper()
	return syncFakeOwn(t, state, defaultOwnSlots)
}

// syncFakeOwn is syncFake with config.ownSlots set to ownSlots (0: every
// service port with several external frontends gets chains of its own).
func syncFakeOwn(t *testing.T, state *desired.State, ownSlots int) *strictFake {
	t.Helper()
	fake := newStrictFake(specFor(state.Family).family)
	p := NewWithInterface(state.Family, fakeKernel(fake))
	p.ownSlots = ownSlots
	if err := p.Sync(context.Background(), state, proxytest.ModeOf(state)); err != nil {
		t.Fatalf("Sync: %v", err)
	}
	return fake
}

func newTracer(t *testing.T, fake *strictFake, state *desired.State) *tracer {
	return &tracer{t: t, table: fake.Table, ip: specFor(state.Family).ip, local: proxytest.LocalAddrs(state)}
}

// TestFlows runs the shared packet-flow table through the rules the
// backend programs for each case: with the default layout, and with every
// service port that has several external frontends in chains of its own
// (the shared cases are too small to reach the default threshold).
func TestFlows(t *testing.T) {
	for _, own := range []int{defaultOwnSlots, 0} {
		t.Run(fmt.Sprintf("ownSlots=%d", own), func(t *testing.T) {
			fakes := map[*desired.State]*strictFake{}
			proxytest.RunFlows(t, func(t *testing.T, state *desired.State, flow proxytest.Flow) proxytest.Result {
				fake := fakes[state]
				if fake == nil {
					fake = syncFakeOwn(t, state, own)
					fakes[state] = fake
				}
				// Node ports on loopback need no mapping: desired decides
				// that they are not DNATed (State.NodePorts.Localhost).
				return newTracer(t, fake, state).trace(flow)
			})
		})
	}
}

// TestTracerNoticesBrokenRules guards the tracer against passing vacuously:
// with a frontend element removed, a flow that was DNATed must be rejected
// by the cluster-IP check instead.
func TestTracerNoticesBrokenRules(t *testing.T) {
	st := caseState(t, "cluster IP", proxy.IPv4)
	fake := syncFake(t, st)
	name := anyService(t, st, 1)
	sp := st.Service(name)
	flow := proxytest.Flow{Source: proxytest.WorldOf(proxy.IPv4).LocalPod(9), Protocol: sp.Protocol, Dest: sp.ClusterIP, DestPort: sp.Port}
	if got := newTracer(t, fake, st).trace(flow); got.Verdict != proxytest.DNAT || len(got.Endpoints) != len(sp.Internal.Endpoints) {
		t.Fatalf("intact table: got %s", got)
	}
	key := []string{addrString(sp.ClusterIP), protoName(sp.Protocol), itoa(sp.Port)}
	tx := fake.NewTransaction()
	tx.Delete(&knftables.Element{Map: mapServiceIPs, Key: key})
	if err := fake.Run(context.Background(), tx); err != nil {
		t.Fatal(err)
	}
	if got := newTracer(t, fake, st).trace(flow); got.Verdict != proxytest.Reject {
		t.Errorf("without the frontend element: got %s, want REJECT", got)
	}
}
