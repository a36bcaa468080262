package proxytest

import (
	"testing"

	"github.com/svcproxy/svcproxy/pkg/pipeline/desired"
	"github.com/svcproxy/svcproxy/pkg/proxy"
)

// DecisionEdit changes, in every service port of a shared case's State, a
// decision away from what Compute makes. A backend that renders the State's
// decisions follows the edit; one that re-derives policy does not.
type DecisionEdit struct {
	Name string
	Case string // a name from Cases()
	Edit func(*desired.ServicePort)
}

// DecisionEdits are the edits RunDecisionEdits applies.
func DecisionEdits() []DecisionEdit {
	unmasq := func(path desired.Path, sources ...desired.Source) func(*desired.ServicePort) {
		return func(sp *desired.ServicePort) {
			r := *sp.Routes // Compute's tables are shared: edit a copy
			for _, src := range sources {
				r[path][src].Masquerade = false
			}
			sp.Routes = &r
		}
	}
	return []DecisionEdit{
		{"empty verdict DROP", "no usable endpoints rejects on every frontend", func(sp *desired.ServicePort) {
			sp.Internal.Empty, sp.External.Empty, sp.Cluster.Empty = desired.Drop, desired.Drop, desired.Drop
		}},
		{"cluster IP unmasqueraded", "cluster IP", unmasq(desired.ClusterIPPath, desired.Sources[:]...)},
		{"external IPs unmasqueraded", "external IPs", unmasq(desired.ExternalPath, desired.Sources[:]...)},
		{"many external IPs unmasqueraded", "several external IPs and LB IPs", unmasq(desired.ExternalPath, desired.Sources[:]...)},
		{"eTP Local, node traffic unmasqueraded", "externalTrafficPolicy Local with a local endpoint",
			unmasq(desired.ExternalPath, desired.FromNode)},
		{"eTP Local, many LB IPs, node traffic unmasqueraded", "externalTrafficPolicy Local with several LB IPs",
			unmasq(desired.ExternalPath, desired.FromNode)},
		{"session affinity unmasqueraded", "session affinity", func(sp *desired.ServicePort) {
			unmasq(desired.ClusterIPPath, desired.Sources[:]...)(sp)
			unmasq(desired.ExternalPath, desired.Sources[:]...)(sp)
		}},
	}
}

// RunDecisionEdits traces every flow of each edit's case, in the edited
// State, with tracer, and reports where the rules disagree with
// desired.Evaluate of that State.
func RunDecisionEdits(t *testing.T, tracer Tracer) {
	t.Helper()
	for _, e := range DecisionEdits() {
		c := caseNamed(t, e.Case)
		for _, family := range proxy.Families {
			t.Run(e.Name+"/"+string(family), func(t *testing.T) {
				state := BuildState(t, c, family)
				for _, sp := range state.Services.All() {
					e.Edit(sp) // a fresh State: nothing else shares its ports
				}
				for _, flow := range c.Flows {
					if !family.Contains(flow.Dest) {
						continue
					}
					if got, want := tracer(t, state, flow), Evaluate(state, flow); !got.Equal(want) {
						t.Errorf("flow %q: rules give %s, the State says %s", flow.Name, got, want)
					}
				}
			})
		}
	}
}

func caseNamed(t *testing.T, name string) Case {
	t.Helper()
	for _, c := range Cases() {
		if c.Name == name {
			return c
		}
	}
	t.Fatalf("no case %q in Cases()", name)
	return Case{}
}
