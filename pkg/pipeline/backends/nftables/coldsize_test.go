package nftables

import (
	"fmt"
	"slices"
	"testing"

	"github.com/svcproxy/svcproxy/pkg/knft"
	"github.com/svcproxy/svcproxy/pkg/pipeline/desired"
)

// TestColdSyncSizesIndexes: a cold full sync big enough to size the
// entry indexes from its first parts (fullClaims) ends with every set's
// index holding exactly the entries its rendered parts claim, neither
// fuller than an index may be nor much bigger than it needs, in both
// shapes (shared and unique endpoint addresses).
func TestColdSyncSizesIndexes(t *testing.T) {
	for _, endpoint := range []func(int) desired.Endpoint{sharedEndpoint, uniqueEndpoint} {
		st := benchStateOf(minSizingSample*16+100, endpoint)
		s := coldSync(st, func(u *knft.Unit) { u.Done() })
		want := renderedEntries(st)
		for set, m := range s.elems {
			n, slots := m.len(), len(m.slots)
			if n != want[set] {
				t.Errorf("%s: %d entries, rendered %d", set, n, want[set])
			}
			if n*maxLoadDen > slots*maxLoadNum || 4*slots > 5*sized(n) {
				t.Errorf("%s: %d entries in %d slots; want between %d and %d slots", set, n, slots, sized(n), 5*sized(n)/4)
			}
		}
		if len(s.elems) != len(want) {
			t.Errorf("%d sets with entries, rendered %d", len(s.elems), len(want))
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
