package reconcile

import (
	"maps"
	"slices"
	"testing"
)

// byTens puts keys 0-9 in group 0, 10-19 in group 1, and so on.
func byTens(k int) uint32 { return uint32(k / 10) }

func groupKeys[V any](tb *Table[own, int, V], g uint32) []int {
	return slices.Sorted(tb.GroupKeys(g))
}

// A group emptied (its keys deleted, or its container deleted and its
// claims dropped) keeps no record, and is filled again like a new one;
// GroupLen counts keys claimed or in the kernel, not those only dirty.
func TestGroupEmptiedAndRefilled(t *testing.T) {
	tb := NewTable[own](withGroups(intKind, byTens))
	tb.Replace(1, items(0, "a", 1, "a", 2, "a"))
	tb.Replace(2, items(10, "b", 11, "b"))
	commitDiff(tb)
	if got := groupKeys(tb, 0); !slices.Equal(got, []int{0, 1, 2}) || tb.GroupLen(0) != 3 || tb.GroupLen(1) != 2 {
		t.Fatalf("group 0 is %v (GroupLen %d), group 1's GroupLen %d", got, tb.GroupLen(0), tb.GroupLen(1))
	}
	// Unclaimed, the keys are still in the kernel until the diff deletes
	// them.
	tb.Replace(1, nil)
	if tb.GroupLen(0) != 3 {
		t.Fatalf("unclaimed keys the kernel holds: GroupLen %d, want 3", tb.GroupLen(0))
	}
	commitDiff(tb)
	if _, ok := tb.groups.heads[0]; ok || tb.GroupLen(0) != 0 || len(groupKeys(tb, 0)) != 0 {
		t.Fatalf("an emptied group: record %t, GroupLen %d, keys %v", ok, tb.GroupLen(0), groupKeys(tb, 0))
	}
	tb.Replace(1, items(5, "c", 6, "c"))
	commitDiff(tb)
	// Its container deleted: the claimed keys stay, to re-fill it with.
	tb.DropKernelGroup(0)
	if got := groupKeys(tb, 0); !slices.Equal(got, []int{5, 6}) || tb.KernelLen() != 2 {
		t.Fatalf("after DropKernelGroup group 0 is %v, the kernel side holds %d keys (group 1's)", got, tb.KernelLen())
	}
	// Claims dropped as well: the keys are only dirty, not counted, and
	// go with the diff, which deletes nothing.
	tb.Replace(1, nil)
	if tb.GroupLen(0) != 0 {
		t.Fatalf("keys only dirty: GroupLen %d, want 0", tb.GroupLen(0))
	}
	if cs := tb.Diff(); len(cs) != 0 {
		t.Fatalf("a deleted container's keys unclaimed: diff %v, want none", cs)
	}
	if len(tb.groups.heads) != 1 || tb.GroupLen(1) != 2 {
		t.Fatalf("groups with a record: %v, want group 1 only", slices.Collect(maps.Keys(tb.groups.heads)))
	}
	tb.Replace(3, items(7, "d"))
	commitDiff(tb)
	if got := groupKeys(tb, 0); !slices.Equal(got, []int{7}) || tb.GroupLen(0) != 1 {
		t.Fatalf("group 0 re-filled is %v, GroupLen %d", got, tb.GroupLen(0))
	}
}

// Containers that come and go (services created and deleted) leave no
// group record behind, in a table with values and a counted one; a
// group's positions given out again to other groups stay right.
func TestGroupsComeAndGoWithoutRecords(t *testing.T) {
	t.Run("values", func(t *testing.T) { groupsChurn(t, withGroups(intKind, byTens), func(int) string { return "v" }) })
	t.Run("counted", func(t *testing.T) {
		groupsChurn(t, withGroups(valuelessKind, byTens), func(int) struct{} { return struct{}{} })
	})
}

func groupsChurn[V any](t *testing.T, kind Kind[int, V], value func(int) V) {
	const live, rounds = 100, 20
	tb := NewTable[own](kind)
	claim := func(o own, g int) {
		its := make([]Item[int, V], 3)
		for i := range its {
			its[i] = Item[int, V]{Key: g*10 + i, Value: value(i)}
		}
		tb.Replace(o, its)
	}
	// Owner o holds group round*live+o: every round, every group is new.
	for round := range rounds {
		for o := range live {
			claim(own(o), round*live+o)
		}
		if round%2 == 1 {
			// Half the containers deleted before their claims go.
			for g := (round - 1) * live; g < round*live; g += 2 {
				tb.DropKernelGroup(uint32(g))
			}
		}
		commitDiff(tb)
		if len(tb.groups.heads) != live || tb.KernelLen() != 3*live {
			t.Fatalf("round %d: %d group records, %d keys held; want %d groups of 3", round, len(tb.groups.heads), tb.KernelLen(), live)
		}
		checkGroupLists(t, tb)
	}
	for o := range live {
		tb.Replace(own(o), nil)
	}
	commitDiff(tb)
	if len(tb.groups.heads) != 0 || tb.KernelLen() != 0 {
		t.Fatalf("every owner gone: %d group records, %d keys held", len(tb.groups.heads), tb.KernelLen())
	}
	if tb.groups.links.n != tb.entries.n {
		t.Fatalf("%d links for %d entries", tb.groups.links.n, tb.entries.n)
	}
}
