package nftables

import (
	"net/netip"
	"strings"
	"testing"

	"sigs.k8s.io/knftables"

	"github.com/svcproxy/svcproxy/pkg/pipeline/desired"
	"github.com/svcproxy/svcproxy/pkg/proxy"
)

// TestRangeWidenedDeletesFirst: a source range widened to one that
// overlaps it is a delete and an add in its allow set, an interval set
// whose kernel refuses an element overlapping one still there. The diff
// puts the delete before the add, and before every element add of the
// sync (its element kind's delete phase).
func TestRangeWidenedDeletesFirst(t *testing.T) {
	st := caseState(t, "loadBalancerSourceRanges", proxy.IPv4)
	p := NewWithInterface(proxy.IPv4, fakeKernel(newStrictFake(knftables.IPv4Family)))
	mustSync(t, p, st)
	var name proxy.ServicePortName
	for n, sp := range st.Services.All() {
		if len(sp.AllowedSources) > 0 {
			name = n
		}
	}
	wide := withChange(st, name, func(sp *desired.ServicePort) {
		narrow := sp.AllowedSources[0]
		sp.AllowedSources = []netip.Prefix{netip.PrefixFrom(narrow.Addr(), narrow.Bits()/2).Masked()}
	})
	p.store.clearDirty()
	p.renderClaim(newConfig(wide), name, wide.Service(name))
	// Positions in the sync's sequence of element changes.
	del, add, firstAdd, at := -1, -1, -1, 0
	for _, u := range p.store.diff() {
		if u.run == nil {
			continue
		}
		allow := strings.HasPrefix(u.run.set, setFirewallAllow)
		for c := range u.kernelUnit().Elems {
			if c.Add && firstAdd < 0 {
				firstAdd = at
			}
			if allow && c.Del && !c.Add {
				del = at
			}
			if allow && c.Add {
				add = at
			}
			at++
		}
	}
	if del < 0 || add < 0 {
		t.Fatalf("widening the range: delete at %d, add at %d; want one of each", del, add)
	}
	if del >= add || del >= firstAdd {
		t.Errorf("the old range is deleted at %d, the new one added at %d, the first element added at %d: want the delete first", del, add, firstAdd)
	}
}
