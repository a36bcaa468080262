package reconcile

import (
	"fmt"
	"slices"
	"testing"
)

func TestKeepSlots(t *testing.T) {
	for _, tc := range []struct {
		name       string
		want, held []string // held: "" is a slot the kernel lacks
		out        []string // nil: want as it is
	}{
		{name: "the kernel's order already", want: []string{"a", "b", "c"}, held: []string{"a", "b", "c"}},
		{name: "one replaced: the others keep their slots",
			want: []string{"a", "c", "d"}, held: []string{"a", "b", "c"}, out: []string{"a", "d", "c"}},
		{name: "reordered by render only",
			want: []string{"c", "b", "a"}, held: []string{"a", "b", "c"}, out: []string{"a", "b", "c"}},
		{name: "grown: the new ones at the end, in want's order",
			want: []string{"e", "b", "d", "a"}, held: []string{"a", "b"}, out: []string{"a", "b", "e", "d"}},
		{name: "shrunk: those above the new count move down into the holes, before new ones",
			want: []string{"a", "x", "d"}, held: []string{"a", "b", "c", "d"}, out: []string{"a", "d", "x"}},
		{name: "slots the kernel lacks are free",
			want: []string{"a", "b", "c"}, held: []string{"", "c", ""}, out: []string{"a", "c", "b"}},
		{name: "a value held twice keeps its first slot",
			want: []string{"a", "b"}, held: []string{"b", "b"}, out: []string{"b", "a"}},
		{name: "nothing held", want: []string{"a", "b"}, held: nil, out: []string{"a", "b"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			checkKeepSlots(t, tc.want, tc.held, tc.out)
		})
	}
}

// TestKeepSlotsMany: past a few values the lookup is a map; the outcome is
// the same (the second slot's value replaced, the last two swapped by
// render).
func TestKeepSlotsMany(t *testing.T) {
	var held []string
	for i := range 40 {
		held = append(held, fmt.Sprint(i))
	}
	want := slices.Clone(held)
	want[1] = "new"
	want[38], want[39] = want[39], want[38]
	out := slices.Clone(held)
	out[1] = "new"
	checkKeepSlots(t, want, held, out)
}

func checkKeepSlots(t *testing.T, want, held, out []string) {
	t.Helper()
	have := func(slot int) (string, bool) { return held[slot], held[slot] != "" }
	got := KeepSlots(slices.Clone(want), len(held), have)
	if !slices.Equal(got, out) || (got == nil) != (out == nil) {
		t.Errorf("KeepSlots(%q, held %q) = %q, want %q", want, held, got, out)
	}
}
