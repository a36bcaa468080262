package reconcile

import "testing"

func keys(ks ...int) []Item[int, struct{}] {
	out := make([]Item[int, struct{}], len(ks))
	for i, k := range ks {
		out[i].Key = k
	}
	return out
}

// A counted table releases an owner's claims by the positions it took,
// not by the items it was given: the caller may reuse them at once.
func TestCountedTableKeepsNoItems(t *testing.T) {
	tb := NewTable[own](valuelessKind)
	its := keys(1, 2)
	tb.Replace(1, its)
	its[0].Key = 3 // the caller's buffer, reused
	tb.Replace(1, nil)
	if tb.Claimed(1) || tb.Claimed(3) || tb.Len() != 0 {
		t.Fatalf("after owner 1 left: claimed 1 %t, 3 %t, Len %d; want nothing claimed",
			tb.Claimed(1), tb.Claimed(3), tb.Len())
	}
}

// Claims on a key are counted, an owner's twice-named key twice: the key
// stays claimed until the last claim goes.
func TestCountedClaimsOnAKey(t *testing.T) {
	tb := NewTable[own](valuelessKind)
	tb.Replace(1, keys(1, 1, 2))
	tb.Replace(2, keys(1))
	tb.Replace(1, keys(2))
	if !tb.Claimed(1) || !tb.Claimed(2) || tb.Len() != 2 {
		t.Fatalf("claimed 1 %t, 2 %t, Len %d; want both claimed", tb.Claimed(1), tb.Claimed(2), tb.Len())
	}
	if _, ok := tb.Want(1); !ok {
		t.Fatal("Want(1) = false with owner 2's claim left")
	}
	tb.Replace(2, nil)
	if tb.Claimed(1) || tb.Len() != 1 {
		t.Fatalf("key 1 claimed %t after its last owner left (Len %d)", tb.Claimed(1), tb.Len())
	}
	if cs := tb.Diff(); len(cs) != 1 || cs[0].Op != Add || cs[0].Key != 2 {
		t.Fatalf("Diff = %v, want only the add of 2", cs)
	}
}

// A full sync that claims in a counted table what the last one did
// allocates nothing: the owners' positions are kept for their numbers.
func TestCountedFullSyncOfTheSameAllocatesNothing(t *testing.T) {
	tb := NewTable[own](valuelessKind)
	parts := map[own][]Item[int, struct{}]{1: keys(1, 2, 3), 2: keys(3, 4), 3: keys(5)}
	sync := func() {
		tb.ResetClaims()
		for o, its := range parts {
			tb.Replace(o, its)
		}
		commitCounted(tb)
	}
	sync()
	if n := testing.AllocsPerRun(10, sync); n != 0 {
		t.Fatalf("a full sync of the same claims allocates %v times", n)
	}
	if tb.KernelLen() != 5 {
		t.Fatalf("the kernel side holds %d keys, want 5", tb.KernelLen())
	}
}

func commitCounted(tb *Table[own, int, struct{}]) {
	for _, c := range tb.Diff() {
		tb.Commit(c)
	}
}
