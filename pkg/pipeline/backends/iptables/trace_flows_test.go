package iptables

import (
	"testing"

	"github.com/svcproxy/svcproxy/pkg/kiptables"
	"github.com/svcproxy/svcproxy/pkg/pipeline/desired"
	"github.com/svcproxy/svcproxy/pkg/testing/proxytest"
)

// flowOptions are the options the shared flows are traced with. The shared
// semantics reject unknown ports on a cluster IP, which upstream's iptables
// mode does not by default, so it is configured here and the default is
// tested on its own (TestUpstreamDefaults). Localhost node ports are the
// State's decision (the shared cases leave them off).
var flowOptions = Options{RejectUnknownClusterIPPorts: true}

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
		// The shared cases leave localhost node ports off (desired's
		// decision); TestUpstreamDefaults and TestLoopbackNodePortAddresses
		// cover them on.
		return newTracer(t, fake, state).trace(flow)
	})
}
