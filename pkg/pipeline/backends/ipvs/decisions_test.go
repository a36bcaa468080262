package ipvs

import (
	"context"
	"slices"
	"testing"

	"github.com/svcproxy/svcproxy/pkg/proxy"
	"github.com/svcproxy/svcproxy/pkg/testing/proxytest"
)

// unrenderable are the decision edits IPVS cannot express: the cluster-IP
// masquerade is one set of iptables rules for every cluster IP, from the
// State's masquerade policy, so a port whose routes say otherwise fails the
// sync (as nftables fails on routes its rules cannot tell apart).
var unrenderable = []string{"cluster IP unmasqueraded", "session affinity unmasqueraded"}

// TestRendersDecisions: what IPVS programs follows desired's decisions
// (proxytest.DecisionEdits), not a re-derivation of them: every flow of an
// edited State gives desired.Evaluate's outcome of that State, up to IPVS
// mode's documented differences (translate), and what IPVS cannot express
// is refused. Before IPVS read the routes it put eTP=Cluster external IPs
// in the masquerading sets whatever the routes said.
func TestRendersDecisions(t *testing.T) {
	cases := proxytest.Cases()
	for _, e := range proxytest.DecisionEdits() {
		i := slices.IndexFunc(cases, func(c proxytest.Case) bool { return c.Name == e.Case })
		if i < 0 {
			t.Fatalf("no case %q", e.Case)
		}
		c := cases[i]
		for _, family := range proxy.Families {
			t.Run(e.Name+"/"+string(family), func(t *testing.T) {
				state := proxytest.BuildState(t, c, family)
				for _, sp := range state.Services.All() {
					e.Edit(sp)
				}
				f := newFakes()
				err := newProxier(f, family, Options{}).Sync(context.Background(), state, proxy.RecoverySync)
				if slices.Contains(unrenderable, e.Name) {
					if err == nil {
						t.Fatal("a route IPVS cannot express was synced")
					}
					return
				}
				if err != nil {
					t.Fatalf("Sync: %v", err)
				}
				for _, flow := range c.Flows {
					if !family.Contains(flow.Dest) {
						continue
					}
					got := (&tracer{t: t, f: f, state: state}).trace(flow)
					if want := translate(state, flow, proxytest.Evaluate(state, flow)); !got.Equal(want) {
						t.Errorf("flow %q: IPVS gives %s, the State says %s", flow.Name, got, want)
					}
				}
			})
		}
	}
}
