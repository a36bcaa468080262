package iptables

import (
	"testing"

	"github.com/svcproxy/svcproxy/pkg/kiptables"
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
		// With flowOptions (no localhostNodePorts) node ports do not answer
		// on loopback, as upstream's; TestUpstreamDefaults and
		// TestLoopbackNodePortAddresses cover it on.
		return proxytest.MapBack(flow, newTracer(t, fake, state).trace(flow), proxytest.LoopbackNodePortUnserved)
	})
}
