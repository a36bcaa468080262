package reconcile

import (
	"fmt"
	"testing"
)

// A table of several chunks of entries: positions past the first chunk,
// positions freed and given out again, and a reserved table, each found
// by its key with its claim and kernel value.
func TestEntriesAcrossChunks(t *testing.T) {
	const n = 3*chunkLen + 5
	for _, reserve := range []int{0, n, chunkLen / 2} {
		tb := NewTable[own](intKind)
		tb.Reserve(reserve)
		its := make([]Item[int, string], n)
		for k := range its {
			its[k] = Item[int, string]{Key: k, Value: fmt.Sprint(k)}
		}
		tb.Replace(1, its)
		commitDiff(tb)
		// The first half goes; its positions go to new keys.
		tb.Replace(1, its[n/2:])
		commitDiff(tb)
		more := make([]Item[int, string], n/2)
		for i := range more {
			more[i] = Item[int, string]{Key: n + i, Value: fmt.Sprint(n + i)}
		}
		tb.Replace(2, more)
		commitDiff(tb)
		if tb.Len() != n-n/2+n/2 || tb.KernelLen() != tb.Len() {
			t.Fatalf("reserve %d: Len %d, KernelLen %d, want %d", reserve, tb.Len(), tb.KernelLen(), n)
		}
		if tb.entries.n > n+chunkLen {
			t.Fatalf("reserve %d: %d entries for %d keys: freed positions not taken again", reserve, tb.entries.n, n)
		}
		for k := range n + n/2 {
			v, ok := tb.Kernel(k)
			if want := k >= n/2; ok != want || (ok && v != fmt.Sprint(k)) {
				t.Fatalf("reserve %d: Kernel(%d) = %q, %t; want held %t", reserve, k, v, ok, want)
			}
		}
	}
}
