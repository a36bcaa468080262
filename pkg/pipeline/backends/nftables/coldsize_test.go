package nftables

import (
	"fmt"
	"slices"
	"testing"

	"github.com/svcproxy/svcproxy/pkg/knft"
	"github.com/svcproxy/svcproxy/pkg/pipeline/desired"
)

// TestColdSyncClaimsEveryElement: a cold full sync ends with the kernel
// side of each set holding exactly the distinct elements (slot groups)
// its rendered parts claim, in both shapes (shared and unique endpoint
// addresses).
func TestColdSyncClaimsEveryElement(t *testing.T) {
	for _, endpoint := range []func(int) desired.Endpoint{sharedEndpoint, uniqueEndpoint} {
		st := benchStateOf(1100, endpoint)
		s := coldSync(st, func(u *knft.Unit) { u.Done() })
		want := renderedEntries(st)
		total := 0
		for set, n := range want {
			total += n
			if got := s.groupLen(set); got != n {
				t.Errorf("%s: %d elements, rendered %d", set, got, n)
			}
		}
		if got := s.setElems.KernelLen() + s.mapElems.KernelLen(); got != total {
			t.Errorf("the kernel side holds %d elements, rendered %d", got, total)
		}
	}
}

// renderedEntries counts the distinct entries st's parts claim, by set.
func renderedEntries(st *desired.State) map[string]int {
	cfg := newConfig(st)
	keys := map[string]bool{}
	counts := map[string]int{}
	parts := []*part{renderGlobal(st, cfg)}
	for _, sp := range st.Services.All() {
		parts = append(parts, renderService(cfg, sp))
	}
	for _, p := range parts {
		for _, el := range p.elems {
			if k := el.set + "\x00" + el.key; !keys[k] {
				keys[k] = true
				counts[el.set]++
			}
		}
	}
	return counts
}

// TestRenderScratchReuse: parts rendered one after the other with the
// same config, each element list handed back once claimed (renderClaim),
// hold what parts rendered each with a config of its own hold: nothing
// of one survives into the next.
func TestRenderScratchReuse(t *testing.T) {
	st := benchStateOf(40, uniqueEndpoint)
	shared := newConfig(st)
	for name, sp := range st.Services.All() {
		got := renderService(shared, sp)
		elems := slices.Clone(got.elems)
		shared.scratch.recycle(got.elems)
		want := renderService(newConfig(st), sp).elems
		if fmt.Sprint(elems) != fmt.Sprint(want) {
			t.Fatalf("%s rendered with a reused scratch:\n%v\nwant\n%v", name, elems, want)
		}
	}
}
