package desired_test

import (
	"slices"
	"testing"

	"github.com/svcproxy/svcproxy/pkg/pipeline/desired"
	"github.com/svcproxy/svcproxy/pkg/proxy"
	"github.com/svcproxy/svcproxy/pkg/testing/proxytest"
)

// TestFlows runs the shared packet-flow table against the reference
// evaluator: Compute's policy, seen through the semantics every backend
// must implement.
func TestFlows(t *testing.T) {
	proxytest.RunFlows(t, evaluate)
}

// TestDSRFlows runs direct server return's flow table against the
// reference evaluator: which endpoints are tunnelled, and what a peer's
// tunnelled flows meet here.
func TestDSRFlows(t *testing.T) {
	proxytest.RunCases(t, proxytest.DSRCases(), evaluate)
}

func evaluate(_ *testing.T, state *desired.State, flow proxytest.Flow) proxytest.Result {
	return proxytest.Evaluate(state, flow)
}

// caseNamed finds a case of the shared table by name.
func caseNamed(t *testing.T, name string) proxytest.Case {
	t.Helper()
	for _, c := range proxytest.Cases() {
		if c.Name == name {
			return c
		}
	}
	t.Fatalf("no case %q", name)
	return proxytest.Case{}
}

// TestStateShape checks what flows cannot show: affinity timeouts and
// health-check servers, through the Tracker, in both families.
func TestStateShape(t *testing.T) {
	for _, family := range proxy.Families {
		t.Run(string(family), func(t *testing.T) {
			sticky := proxytest.BuildState(t, caseNamed(t, "session affinity"), family)
			for name, sp := range sticky.Services.All() {
				if sp.AffinitySeconds != 600 {
					t.Errorf("%s: AffinitySeconds = %d, want 600", name, sp.AffinitySeconds)
				}
			}
			plain := proxytest.BuildState(t, caseNamed(t, "cluster IP"), family)
			for name, sp := range plain.Services.All() {
				if sp.AffinitySeconds != 0 {
					t.Errorf("%s: AffinitySeconds = %d, want 0", name, sp.AffinitySeconds)
				}
			}

			etp := proxytest.BuildState(t, caseNamed(t, "externalTrafficPolicy Local with a local endpoint"), family)
			want := []desired.HealthCheck{{Service: proxy.ServiceName{Namespace: "ns1", Name: "etp"}, Port: 32000, LocalReady: 1}}
			if !slices.Equal(etp.HealthChecks, want) {
				t.Errorf("HealthChecks = %+v, want %+v", etp.HealthChecks, want)
			}
			none := proxytest.BuildState(t, caseNamed(t, "externalTrafficPolicy Local without a local endpoint"), family)
			if len(none.HealthChecks) != 1 || none.HealthChecks[0].LocalReady != 0 {
				t.Errorf("HealthChecks = %+v, want one with LocalReady 0", none.HealthChecks)
			}
			if etp.Masquerade.Mark != 0x4000 || etp.Changed != nil || etp.Family != family {
				t.Errorf("Mark %#x Changed %v Family %s, want 0x4000, nil (full sync), %s",
					etp.Masquerade.Mark, etp.Changed, etp.Family, family)
			}
		})
	}
}
