package bpfmap

import (
	"maps"
	"slices"
	"testing"
)

func TestDiff(t *testing.T) {
	have := map[int]string{1: "a", 2: "b", 3: "c"}
	want := map[int]string{2: "b", 3: "C", 4: "d"}
	put, vals, del := Diff(have, want)
	got := map[int]string{}
	for i, k := range put {
		got[k] = vals[i]
	}
	if !maps.Equal(got, map[int]string{3: "C", 4: "d"}) {
		t.Errorf("writes %v, want only the changed 3 and the new 4", got)
	}
	if !slices.Equal(del, []int{1}) {
		t.Errorf("deletes %v, want [1]", del)
	}
	if put, _, del := Diff(want, want); len(put)+len(del) != 0 {
		t.Errorf("equal contents: writes %v, deletes %v", put, del)
	}
}
