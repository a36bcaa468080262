package reconcile

import (
	"fmt"
	"testing"
)

// BenchmarkColdBatch is the engine's share of a cold sync of one kind:
// 10k owners claim ten keys each in a new table, whose batch is then
// applied (to nothing) and recorded.
func BenchmarkColdBatch(b *testing.B) { benchColdBatch(b, intKind) }

// BenchmarkColdBatchGrouped is BenchmarkColdBatch with each owner's keys
// a group of their own (nftables' endpoint maps): 10k groups of ten keys.
func BenchmarkColdBatchGrouped(b *testing.B) { benchColdBatch(b, withGroups(intKind, byTens)) }

func benchColdBatch(b *testing.B, kind Kind[int, string]) {
	const owners, per = 10000, 10
	parts := make([][]Item[int, string], owners)
	for o := range parts {
		for i := range per {
			parts[o] = append(parts[o], Item[int, string]{Key: o*per + i, Value: fmt.Sprint(i)})
		}
	}
	b.ReportAllocs()
	for b.Loop() {
		tb := NewTable[own](kind)
		tb.Reserve(owners * per)
		for o, its := range parts {
			tb.Replace(own(o), its)
		}
		n, err := RunUntilFailure(Batch(tb, func([]Change[int, string]) error { return nil }))
		if err != nil || n != owners*per || tb.KernelLen() != n {
			b.Fatalf("RunUntilFailure = %d, %v; %d held", n, err, tb.KernelLen())
		}
	}
}

// BenchmarkColdBatchValueless is BenchmarkColdBatch for a kind without
// values (ipset members, nftables set elements), half the keys claimed by two
// owners: the table counts the claims.
func BenchmarkColdBatchValueless(b *testing.B) {
	const owners, per = 10000, 10
	const keys = (owners + 1) * per / 2
	parts := make([][]Item[int, struct{}], owners)
	for o := range parts {
		for i := range per {
			// Half of o's keys are o+1's too.
			parts[o] = append(parts[o], Item[int, struct{}]{Key: o*per/2 + i})
		}
	}
	b.ReportAllocs()
	for b.Loop() {
		tb := NewTable[own](valuelessKind)
		tb.Reserve(keys)
		for o, its := range parts {
			tb.Replace(own(o), its)
		}
		n, err := RunUntilFailure(Batch(tb, func([]Change[int, struct{}]) error { return nil }))
		if err != nil || n != keys || tb.KernelLen() != n {
			b.Fatalf("RunUntilFailure = %d, %v; %d held", n, err, tb.KernelLen())
		}
	}
}
