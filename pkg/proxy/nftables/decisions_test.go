package nftables

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/svcproxy/svcproxy/pkg/proxy"
	"github.com/svcproxy/svcproxy/pkg/proxy/desired"
	"github.com/svcproxy/svcproxy/pkg/proxy/proxytest"
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
	c := proxytest.Case{}
	for _, pc := range proxytest.Cases() {
		if pc.Name == "cluster IP" {
			c = pc
		}
	}
	state := proxytest.BuildState(t, c, proxy.IPv4)
	for _, sp := range state.Services {
		sp.Routes[desired.ClusterIPPath][desired.FromPod].Masquerade = true
		sp.Routes[desired.ClusterIPPath][desired.FromOutside].Masquerade = false
	}
	p := NewWithInterface(state.Family, newStrictFake(specFor(state.Family).family))
	if err := p.Sync(context.Background(), state); err == nil || !strings.Contains(err.Error(), "cannot render routes") {
		t.Errorf("Sync = %v, want a rendering error", err)
	}
}
