package desired_test

import (
	"testing"

	"github.com/svcproxy/svcproxy/pkg/proxy/desired"
	"github.com/svcproxy/svcproxy/pkg/proxy/proxytest"
)

// TestFlows runs the shared packet-flow table against the reference
// evaluator: Compute's policy, seen through the semantics every backend
// must implement.
func TestFlows(t *testing.T) {
	proxytest.RunFlows(t, func(_ *testing.T, state *desired.State, flow proxytest.Flow) proxytest.Result {
		return proxytest.Evaluate(state, flow)
	})
}
