package reconcile

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// testValues are values an Index finds, kept in a slice as its callers
// keep theirs.
type testValues struct {
	keys  []string
	index Index[string]
}

func (v *testValues) keyAt(pos int32) string { return v.keys[pos] }

func (v *testValues) add(k string) {
	v.keys = append(v.keys, k)
	v.index.Add(k, int32(len(v.keys)-1), v.keyAt)
}

// TestIndexAgreesWithAMap: random adds, lookups and removals (which move
// cells back within their probe run, wrapping around the cells' end)
// leave the index finding exactly what a Go map finds.
func TestIndexAgreesWithAMap(t *testing.T) {
	for _, reserved := range []int{0, 100} {
		rng := rand.New(rand.NewPCG(1, uint64(reserved)))
		v := &testValues{index: NewIndex[string](nil)}
		v.index.Reset(reserved)
		want := map[string]int32{}
		for step := range 20000 {
			key := fmt.Sprintf("10.0.%d.%d . tcp . 80", rng.IntN(4), rng.IntN(100))
			pos, ok := v.index.Find(key, v.keyAt)
			wantPos, wantOK := want[key]
			switch {
			case ok != wantOK || (ok && pos != wantPos):
				t.Fatalf("step %d: Find(%q) = %d, %t; want %d, %t", step, key, pos, ok, wantPos, wantOK)
			case !ok && rng.IntN(3) > 0:
				v.add(key)
				want[key] = int32(len(v.keys) - 1)
			case ok && rng.IntN(2) == 0:
				if got := v.index.Remove(key, v.keyAt); got != pos {
					t.Fatalf("step %d: Remove(%q) = %d, want %d", step, key, got, pos)
				}
				delete(want, key)
			}
			if v.index.Len() != len(want) {
				t.Fatalf("step %d: Len %d, want %d", step, v.index.Len(), len(want))
			}
		}
	}
}

// TestIndexCopiedInCellOrder: keys added to an index in another index's
// cell order (one store read back from another) arrive sorted by the bits
// of their hash that chose their cells there; they must not pile up into
// one run here, which would make every add probe to its end.
func TestIndexCopiedInCellOrder(t *testing.T) {
	from := &testValues{index: NewIndex[string](nil)}
	for i := range 5000 {
		from.add(fmt.Sprintf("198.18.%d.%d . 198.18.%d.%d", i>>8, i&255, i>>8, i&255))
	}
	to := &testValues{index: NewIndex[string](nil)}
	longest := 0
	for _, c := range from.index.cells {
		if c == 0 {
			continue
		}
		k := from.keys[c-1]
		to.add(k)
		mask := len(to.index.cells) - 1
		steps := 0
		for i := to.index.home(k) & mask; to.index.cells[i] != int32(len(to.keys)); i = (i + 1) & mask {
			steps++
		}
		longest = max(longest, steps)
	}
	if longest > 500 {
		t.Errorf("an add probed %d cells", longest)
	}
}

// TestIndexResetTakesNWithoutGrowing: an index reset for n keys holds
// them in the cells it made, and Clear keeps those cells.
func TestIndexResetTakesNWithoutGrowing(t *testing.T) {
	v := &testValues{index: NewIndex[string](nil)}
	v.index.Reset(1000)
	cells := len(v.index.cells)
	for i := range 1000 {
		v.add(fmt.Sprint(i))
	}
	if len(v.index.cells) != cells {
		t.Errorf("grew from %d to %d cells for the 1000 keys reserved", cells, len(v.index.cells))
	}
	v.index.Clear()
	if _, ok := v.index.Find("1", v.keyAt); ok || v.index.Len() != 0 || len(v.index.cells) != cells {
		t.Errorf("cleared: finds a key (%t), Len %d, %d cells (had %d)", ok, v.index.Len(), len(v.index.cells), cells)
	}
}
