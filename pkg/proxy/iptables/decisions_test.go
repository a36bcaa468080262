package iptables

import (
	"testing"

	"github.com/svcproxy/svcproxy/pkg/proxy"
	"github.com/svcproxy/svcproxy/pkg/proxy/desired"
	"github.com/svcproxy/svcproxy/pkg/proxy/proxytest"
)

// TestRendersDecisions: the rules follow desired's decisions, not a
// re-derivation of them. Each edit below changes a decision away from
// what Compute would make; the traced rules must still agree with
// desired.Evaluate. Before the backend read them, it rejected where the
// State said DROP (it never read Dispatch.Empty) and masqueraded cluster-IP
// traffic by the detector whatever the routes said.
func TestRendersDecisions(t *testing.T) {
	for _, tc := range []struct {
		name, caseName string
		edit           func(*desired.ServicePort)
	}{
		{"empty verdict DROP", "no usable endpoints rejects on every frontend", func(sp *desired.ServicePort) {
			sp.Internal.Empty, sp.External.Empty, sp.Cluster.Empty = desired.Drop, desired.Drop, desired.Drop
		}},
		{"cluster IP not masqueraded", "cluster IP", func(sp *desired.ServicePort) {
			for _, src := range desired.Sources {
				sp.Routes[desired.ClusterIPPath][src].Masquerade = false
			}
		}},
	} {
		for _, family := range proxy.Families {
			t.Run(tc.name+"/"+string(family), func(t *testing.T) {
				c := caseNamed(t, tc.caseName)
				state := proxytest.BuildState(t, c, family)
				for _, sp := range state.Services {
					tc.edit(sp) // a fresh State: nothing else shares its ports
				}
				fake, _ := syncFake(t, state, flowOptions)
				for _, flow := range c.Flows {
					if !family.Contains(flow.Dest) {
						continue
					}
					if got, want := newTracer(t, fake, state).trace(flow), proxytest.Evaluate(state, flow); !got.Equal(want) {
						t.Errorf("flow %q: rules give %s, the State says %s", flow.Name, got, want)
					}
				}
			})
		}
	}
}
