package nftables

import (
	"runtime"
	"strings"
	"testing"
)

// BenchmarkStoreLiveHeap reports the heap the store holds at 10k × 10
// (benchState, no kernel): after a cold sync, and after a restart's
// read-back (the cold store's kernel side handed to a new store through
// storeSink, as knft's dump does) and full sync. Each figure is the heap in
// use after building the store minus before, after a GC each.
// docs/performance.md, issue #17.
func BenchmarkStoreLiveHeap(b *testing.B) {
	st := benchState(10000)
	sync := func(s *store) *store {
		s.tablePresent = true
		(&Proxier{store: s}).fullClaims(st, newConfig(st))
		for _, u := range s.diff() {
			u.kernelUnit().Done()
		}
		s.clearDirty()
		return s
	}
	for b.Loop() {
		var old *store
		cold := heldBy(func() *store { old = sync(newStore()); return old })
		restart := heldBy(func() *store { return sync(readBackFrom(old)) })
		runtime.KeepAlive(old) // alive before and after the restart's figure
		if cold == 0 || restart == 0 {
			b.Fatalf("nothing held: cold %d, restart %d bytes", cold, restart)
		}
		b.ReportMetric(float64(cold)/1e6, "cold-MB")
		b.ReportMetric(float64(restart)/1e6, "restart-MB")
	}
}

// readBackFrom is a new store read back from what old committed, set by
// set, as knft.Kernel.ReadBack hands a table to its Sink.
func readBackFrom(old *store) *store {
	s := newStore()
	sink := storeSink{s}
	sink.Table()
	for name, c := range old.chains {
		sink.Chain(name)
		for _, r := range c.kernel {
			sink.Rule(name, r)
		}
	}
	for name, e := range old.sets {
		if !sink.Set(name, e.isMap, e.size) {
			continue
		}
		var kv []string
		for k, el := range old.elems[name] {
			// Copies, as the dump decodes them.
			kv = append(kv, strings.Clone(k), strings.Clone(el.kernel))
			if len(kv) == 2*550 { // one reply message's worth
				sink.Elements(name, kv)
				kv = kv[:0]
			}
		}
		sink.Elements(name, kv)
	}
	return s
}

// heldBy returns the bytes of heap the store made by build keeps alive.
func heldBy(build func() *store) uint64 {
	before := heapInUse()
	s := build()
	after := heapInUse()
	runtime.KeepAlive(s)
	if after < before {
		return 0
	}
	return after - before
}

func heapInUse() uint64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}
