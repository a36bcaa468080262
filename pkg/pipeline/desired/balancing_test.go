package desired_test

import (
	"testing"

	"github.com/svcproxy/svcproxy/pkg/pipeline/desired"
	"github.com/svcproxy/svcproxy/pkg/pipeline/model"
	"github.com/svcproxy/svcproxy/pkg/proxy"
)

// balancingState computes a Service whose annotation says value ("" for
// none) on a node whose default is def, and returns its port.
func balancingState(t *testing.T, value string, def proxy.Balancing) *desired.ServicePort {
	t.Helper()
	return annotatedPort(t, model.ExternalBalancingAnnotation, value, func(o *desired.Options) { o.ExternalBalancing = def })
}

// The external balancing algorithm is decided once, in desired: the
// Service's annotation wins, else the node's default, else random; an
// unknown annotation (refused by model) leaves the node's default. The
// State never says "default".
func TestExternalBalancingDecided(t *testing.T) {
	for _, tc := range []struct {
		annotation string
		def, want  proxy.Balancing
	}{
		{"", proxy.BalanceDefault, proxy.BalanceRandom},
		{"", proxy.BalanceMaglev, proxy.BalanceMaglev},
		{"maglev", proxy.BalanceDefault, proxy.BalanceMaglev},
		{"maglev", proxy.BalanceRandom, proxy.BalanceMaglev},
		{"random", proxy.BalanceMaglev, proxy.BalanceRandom},
		{"bogus", proxy.BalanceMaglev, proxy.BalanceMaglev},
		{"bogus", proxy.BalanceDefault, proxy.BalanceRandom},
	} {
		if got := balancingState(t, tc.annotation, tc.def).ExternalBalancing; got != tc.want {
			t.Errorf("annotation %q, node default %q: got %q, want %q", tc.annotation, tc.def, got, tc.want)
		}
	}
}

// A change of the decision is a change of the port, so an incremental
// Compute hands it to the backend.
func TestExternalBalancingInEqual(t *testing.T) {
	sp := balancingState(t, "", proxy.BalanceRandom)
	if again := balancingState(t, "random", proxy.BalanceMaglev); !sp.Equal(again) {
		t.Error("equal decisions compare unequal")
	}
	if other := balancingState(t, "maglev", proxy.BalanceRandom); sp.Equal(other) {
		t.Error("ports differing only in their balancing compare equal")
	}
}
