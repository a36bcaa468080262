package nftables

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// TestIndexAgreesWithAMap: random adds, lookups and removals (which
// move entries back within their probe run, wrapping around the table's
// end) leave the index holding exactly what a Go map holds, and every
// entry reachable by its key.
func TestIndexAgreesWithAMap(t *testing.T) {
	for _, reserved := range []int{0, 100} {
		rng := rand.New(rand.NewPCG(1, uint64(reserved)))
		x := newTestIndex(reserved)
		want := map[string]*testEntry{}
		for step := range 20000 {
			key := fmt.Sprintf("10.0.%d.%d . tcp . 80", rng.IntN(4), rng.IntN(100))
			switch e := x.get(key); {
			case e != want[key]:
				t.Fatalf("step %d: get(%q) = %p, want %p", step, key, e, want[key])
			case e == nil && rng.IntN(3) > 0:
				e = &testEntry{key: key}
				x.add(e)
				want[key] = e
			case e != nil && rng.IntN(2) == 0:
				x.remove(key)
				delete(want, key)
			}
			if x.len() != len(want) {
				t.Fatalf("step %d: len %d, want %d", step, x.len(), len(want))
			}
		}
		seen := 0
		for e := range x.all {
			if want[e.key] != e || x.get(e.key) != e {
				t.Fatalf("entry %q: not the map's, or not found by its key", e.key)
			}
			seen++
		}
		if seen != len(want) {
			t.Errorf("all yielded %d entries, want %d", seen, len(want))
		}
	}
}

// TestIndexSize: a reserved index takes n values, and a fifth more,
// without growing; no index fills more than maxLoad of its slots; compact
// shrinks one that grew (or lost values) back to its sized size, every
// value still found by its key.
func TestIndexSize(t *testing.T) {
	x := newTestIndex(1000)
	slots := len(x.slots)
	for i := range 1200 {
		x.add(&testEntry{key: fmt.Sprint(i)})
	}
	if len(x.slots) != slots {
		t.Errorf("grew from %d to %d slots for 1200 values, 1000 reserved", slots, len(x.slots))
	}
	for i := 1200; i < 5000; i++ {
		x.add(&testEntry{key: fmt.Sprint(i)})
		if x.n*maxLoadDen > len(x.slots)*maxLoadNum {
			t.Fatalf("%d values in %d slots", x.n, len(x.slots))
		}
	}
	for i := 1000; i < 5000; i++ {
		x.remove(fmt.Sprint(i))
	}
	x.compact()
	x.compact() // sized: nothing to do
	if want := sized(1000); len(x.slots) != want {
		t.Errorf("compacted to %d slots, want %d", len(x.slots), want)
	}
	for i := range 1000 {
		if e := x.get(fmt.Sprint(i)); e == nil || e.key != fmt.Sprint(i) {
			t.Fatalf("value %d lost by compact", i)
		}
	}
	var none *testIndex
	if none.len() != 0 || none.get("x") != nil {
		t.Error("a nil index is not empty")
	}
	none.remove("x")
}

// TestIndexCopiedInSlotOrder: values added to an index in another index's
// slot order (one store read back from another) do not pile up into one
// run, which made every add probe to its end (a quadratic read-back when
// all indexes hashed alike).
func TestIndexCopiedInSlotOrder(t *testing.T) {
	from := &testIndex{}
	for i := range 5000 {
		from.add(&testEntry{key: fmt.Sprintf("198.18.%d.%d . 198.18.%d.%d", i>>8, i&255, i>>8, i&255)})
	}
	to := &testIndex{}
	longest := 0
	for e := range from.all {
		to.add(e)
		steps := 0
		for i := to.home(e.key); to.slots[i] != e; i = to.next(i) {
			steps++
		}
		longest = max(longest, steps)
	}
	if longest > 500 {
		t.Errorf("an add probed %d slots", longest)
	}
}

// testEntry is a value of a test's index.
type testEntry struct{ key string }

func (e *testEntry) indexKey() string { return e.key }

type testIndex = index[string, *testEntry]

// newTestIndex returns an index with room for n values.
func newTestIndex(n int) *testIndex {
	x := &testIndex{}
	x.reserve(n)
	return x
}
