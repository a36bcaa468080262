package reconcile

import (
	"fmt"
	"testing"
)

// Many owners claim one key each and a shared one; owners go and come
// back (their numbers and index cells given out again): each key's claim
// is its owner's, and the shared key's the lowest owner's left.
func TestManyOwnersGoAndComeBack(t *testing.T) {
	const n = 1000
	tb := NewTable[own](intKind)
	claimOf := func(o int) []Item[int, string] { return items(o, fmt.Sprint(o), -1, fmt.Sprint(o)) }
	for o := range n {
		tb.Replace(own(o), claimOf(o))
	}
	for o := 0; o < n; o += 3 {
		tb.Replace(own(o), nil)
	}
	if v, _ := tb.Want(-1); v != "1" {
		t.Fatalf("the shared key wants %q with owner 0 gone, want owner 1's", v)
	}
	for o := 0; o < n; o += 6 {
		tb.Replace(own(o), claimOf(o))
	}
	for o := range n {
		v, ok := tb.Want(o)
		if back := o%3 != 0 || o%6 == 0; ok != back || (ok && v != fmt.Sprint(o)) {
			t.Fatalf("Want(%d) = %q, %t; want its owner's claim: %t", o, v, ok, back)
		}
	}
	if v, _ := tb.Want(-1); v != "0" {
		t.Fatalf("the shared key wants %q with owner 0 back, want %q", v, "0")
	}
	tb.ResetClaims()
	tb.Replace(own(n-1), claimOf(n-1))
	if v, _ := tb.Want(-1); v != fmt.Sprint(n-1) || tb.Len() != 2 {
		t.Fatalf("after a reset the shared key wants %q (Len %d), want the one owner's", v, tb.Len())
	}
}
