package desired

import (
	"slices"
	"testing"

	"github.com/svcproxy/svcproxy/pkg/fieldcheck"
)

// TestEqualComparesEveryField keeps ServicePort.Equal complete: a field
// added to ServicePort and not compared would let the incremental Compute
// keep the old port, so the backend would never program the change (and
// debugstate's round trip, which compares with Equal, would not notice that
// the wire drops it).
func TestEqualComparesEveryField(t *testing.T) {
	equal := func(a, b ServicePort) bool { return a.Equal(&b) }
	if missed := fieldcheck.Uncompared(equal); len(missed) > 0 {
		t.Errorf("ServicePort.Equal does not compare %v", missed)
	}
}

// TestSameGlobalsComparesEveryRenderedField: every State field outside the
// service ports is compared, except the ones SameGlobals documents as not
// rendered by a backend, or rendered whole at every sync. A new global
// field that is not compared would leave the shared rules stale until the
// next full sync.
func TestSameGlobalsComparesEveryRenderedField(t *testing.T) {
	same := func(a, b State) bool { return a.SameGlobals(&b) }
	want := []string{"Changed (cannot change)", "ClusterSources", "HealthChecks", "Lost (cannot change)", "Peers",
		"Services (cannot change)"}
	if missed := fieldcheck.Uncompared(same); !slices.Equal(missed, want) {
		t.Errorf("SameGlobals leaves out %v, want exactly %v (per-port fields, health checks, the tc programs' globals)", missed, want)
	}
	var nilState *State
	if nilState.SameGlobals(&State{}) || (&State{}).SameGlobals(nil) {
		t.Error("a nil State agrees with another")
	}
}
