package iptables

import (
	"testing"

	"github.com/svcproxy/svcproxy/pkg/kiptables"
	"github.com/svcproxy/svcproxy/pkg/pipeline/desired"
	"github.com/svcproxy/svcproxy/pkg/testing/proxytest"
)

// TestRendersDecisions: the rules follow desired's decisions, not a
// re-derivation of them (proxytest.DecisionEdits). Before the backend read
// them, it rejected where the State said DROP (it never read
// Dispatch.Empty) and masqueraded by the detector and the traffic policy
// whatever the routes said.
func TestRendersDecisions(t *testing.T) {
	fakes := map[*desired.State]*kiptables.Fake{}
	proxytest.RunDecisionEdits(t, func(t *testing.T, state *desired.State, flow proxytest.Flow) proxytest.Result {
		if fakes[state] == nil {
			fakes[state], _ = syncFake(t, state, flowOptions)
		}
		return newTracer(t, fakes[state], state).trace(flow)
	})
}
