package scenario

import (
	"slices"
	"testing"

	"github.com/svcproxy/svcproxy/pkg/pipeline/desired"
	"github.com/svcproxy/svcproxy/pkg/proxy"
)

// HeldFunc asks a new backend over node1's kernel which service ports of a
// State the kernel holds as it would program them (syncer.PortHolder).
type HeldFunc func(st *desired.State) (map[proxy.ServicePortName]struct{}, error)

// HeldCases checks held against the kernel a backend programmed with st:
// every port is held, and a port whose endpoints differ from the kernel's
// is not (the others still are).
func (e *Env) HeldCases(t *testing.T, st *desired.State, held HeldFunc) {
	t.Run("EveryPortHeld", func(t *testing.T) {
		got, err := held(st)
		if err != nil {
			t.Fatal(err)
		}
		for name := range st.Services.Keys() {
			if _, ok := got[name]; !ok {
				t.Errorf("%s is not held", name)
			}
		}
	})
	t.Run("ChangedPortNotHeld", func(t *testing.T) {
		name := proxy.ServicePortName{ServiceName: proxy.ServiceName{Namespace: Namespace, Name: "spread"},
			Port: PortName(proxy.TCP), Protocol: proxy.TCP}
		sp := st.Service(name)
		if sp == nil || len(sp.Cluster.Endpoints) < 2 {
			t.Fatalf("%s has no endpoint to take away", name)
		}
		fewer := *sp
		for _, d := range []*desired.Dispatch{&fewer.Internal, &fewer.External, &fewer.Cluster} {
			d.Endpoints = slices.DeleteFunc(slices.Clone(d.Endpoints), func(ep desired.Endpoint) bool {
				return ep == sp.Cluster.Endpoints[0]
			})
		}
		next := *st
		next.Services = st.Services.With(name, &fewer)
		got, err := held(&next)
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := got[name]; ok || len(got) != st.Services.Len()-1 {
			t.Errorf("with %s's endpoints changed: %d of %d ports held, %s among them: %t",
				name, len(got), st.Services.Len(), name, ok)
		}
	})
}
