package iptables

import (
	"testing"

	"github.com/svcproxy/svcproxy/internal/kiptables"
	"github.com/svcproxy/svcproxy/pkg/proxy/desired"
	"github.com/svcproxy/svcproxy/pkg/proxy/proxytest"
)

// flowOptions are the options the shared flows are traced with. The shared
// semantics reject unknown ports on a cluster IP and never accept node
// ports on loopback unless the State lists it; upstream's iptables mode
// does neither by default, so both are configured here and the defaults
// are tested on their own (TestUpstreamDefaults).
var flowOptions = Options{RejectUnknownClusterIPPorts: true, LocalhostNodePorts: false}

// TestFlows runs the shared packet-flow table through the rules the
// backend programs for each case.
func TestFlows(t *testing.T) {
	fakes := map[*desired.State]*kiptables.Fake{}
	proxytest.RunFlows(t, func(t *testing.T, state *desired.State, flow proxytest.Flow) proxytest.Result {
		fake := fakes[state]
		if fake == nil {
			fake, _ = syncFake(t, state, flowOptions)
			fakes[state] = fake
		}
		got := newTracer(t, fake, state).trace(flow)
		// RunFlows compares with flow.Want; map the result back when it is
		// exactly the documented difference.
		if got.Equal(translate(flow, flow.Want)) {
			return flow.Want
		}
		return got
	})
}

// translate turns the reference outcome of a flow into what iptables mode
// does with flowOptions instead: as upstream's, node ports answer on a
// loopback address only for IPv4 with localhostNodePorts (off here; see
// TestUpstreamDefaults and TestLoopbackNodePortAddresses for it on), so
// the packet goes to the host's own stack.
func translate(flow proxytest.Flow, want proxytest.Result) proxytest.Result {
	if flow.Dest.IsLoopback() && want.Verdict != proxytest.Accept {
		return proxytest.Result{Verdict: proxytest.Accept}
	}
	return want
}
