package ipvs

import "testing"

// TestLeftoversFollowOwnership: leftover detection uses Cleanup's rule. A
// node whose only IPVS state is keepalived's and kube-vip's virtual servers
// has no leftovers; IPVS mode's state is one until Cleanup, after which
// only the others' virtual servers remain and nothing is reported.
func TestLeftoversFollowOwnership(t *testing.T) {
	foreignOnly := newFakes()
	addForeign(t, foreignOnly)
	checkLeftovers(t, "only foreign virtual servers", foreignOnly, false)

	f := newFakes()
	ownedWorld(t, f)
	addForeign(t, f)
	checkLeftovers(t, "after an IPVS mode sync", f, true)
	cleanupFamilies(t, f)
	checkLeftovers(t, "after Cleanup", f, false)
}

func checkLeftovers(t *testing.T, when string, f *fakes, want bool) {
	t.Helper()
	present, what, err := leftoversIn(f.link, f.ipset)
	if err != nil || present != want {
		t.Errorf("%s: leftovers = %v (%q), %v; want %v", when, present, what, err, want)
	}
}
