package nftables

import (
	"context"
	"fmt"
	"net/netip"
	"strings"
	"testing"

	"github.com/svcproxy/svcproxy/pkg/pipeline/desired"
	"github.com/svcproxy/svcproxy/pkg/proxy"
	"github.com/svcproxy/svcproxy/pkg/testing/proxytest"
)

// TestRendersDecisions: the rules follow desired's decisions, not a
// re-derivation of them (proxytest.DecisionEdits), with the shared and
// with per-service-port chains. Before the backend read the routes, it
// masqueraded by masqueradeAll, the detector and the traffic policy
// whatever they said.
func TestRendersDecisions(t *testing.T) {
	for _, own := range []int{defaultOwnSlots, 0} {
		t.Run(fmt.Sprintf("ownSlots=%d", own), func(t *testing.T) {
			fakes := map[*desired.State]*strictFake{}
			proxytest.RunDecisionEdits(t, func(t *testing.T, state *desired.State, flow proxytest.Flow) proxytest.Result {
				if fakes[state] == nil {
					fakes[state] = syncFakeOwn(t, state, own)
				}
				return newTracer(t, fakes[state], state).trace(flow)
			})
		})
	}
}

// TestUnrenderableRoutesFail: routes the rules cannot express fail the sync
// instead of being rendered as something else. Here pods would be
// masqueraded and everyone else not, which no single-chain mark can say.
func TestUnrenderableRoutesFail(t *testing.T) {
	state := caseState(t, "cluster IP", proxy.IPv4)
	for _, sp := range state.Services.All() {
		r := *sp.Routes // Compute's tables are shared: edit a copy
		r[desired.ClusterIPPath][desired.FromPod].Masquerade = true
		r[desired.ClusterIPPath][desired.FromOutside].Masquerade = false
		sp.Routes = &r
	}
	p := NewWithInterface(state.Family, fakeKernel(newStrictFake(specFor(state.Family).family)))
	if err := p.Sync(context.Background(), state, proxytest.ModeOf(state)); err == nil || !strings.Contains(err.Error(), "cannot render routes") {
		t.Errorf("Sync = %v, want a rendering error", err)
	}
}

// TestServiceRangeFlows: addresses of State.ServiceCIDRs that no Service
// holds are dropped, as desired.Evaluate says (only nftables mode puts the
// ranges in the State, so the shared cases, traced by every backend, have
// none).
func TestServiceRangeFlows(t *testing.T) {
	for _, family := range proxy.Families {
		w := proxytest.WorldOf(family)
		state := caseState(t, "cluster IP", family)
		state.ServiceCIDRs = []netip.Prefix{w.ServiceCIDR}
		tr := newTracer(t, syncFake(t, state), state)
		for _, flow := range []proxytest.Flow{
			{Name: "unheld service address", Source: w.LocalPod(9), Protocol: proxy.TCP, Dest: w.ClusterIP(200), DestPort: 80},
			{Name: "unknown port on a cluster IP", Source: w.LocalPod(9), Protocol: proxy.TCP, Dest: w.ClusterIP(1), DestPort: 81},
			{Name: "outside the range", Source: w.LocalPod(9), Protocol: proxy.TCP, Dest: w.ExternalClient, DestPort: 80},
		} {
			got, want := tr.trace(flow), proxytest.Evaluate(state, flow)
			if !got.Equal(want) {
				t.Errorf("%s %s: rules give %s, the State says %s", family, flow.Name, got, want)
			}
		}
		if got := proxytest.Evaluate(state, proxytest.Flow{Source: w.LocalPod(9), Protocol: proxy.TCP, Dest: w.ClusterIP(200), DestPort: 80}); got.Verdict != proxytest.Drop {
			t.Errorf("%s: Evaluate gives %s for an unheld service address, want DROP", family, got)
		}
	}
}
