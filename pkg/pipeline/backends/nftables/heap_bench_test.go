package nftables

import (
	"bytes"
	"flag"
	"fmt"
	"maps"
	"os"
	"runtime"
	"runtime/metrics"
	"runtime/pprof"
	"slices"
	"testing"
	"time"

	"github.com/svcproxy/svcproxy/pkg/knft"
	"github.com/svcproxy/svcproxy/pkg/pipeline/desired"
	"github.com/svcproxy/svcproxy/pkg/proxy"
)

// BenchmarkStoreLiveHeap reports the heap the store holds at 10k × 10
// (benchState, no kernel): after a cold sync, and after a restart's
// read-back (the cold store's kernel side handed to a new store through
// storeSink, as knft's dump does) and full sync. Each figure is the heap in
// use after building the store minus before, after a GC each. The
// unique-… figures are the same with every endpoint at an address of its
// own (uniqueEndpoint: more hairpin elements, each with one claim), the
// end-to-end benchmark's shape (make bench-e2e, docs/performance.md).
func BenchmarkStoreLiveHeap(b *testing.B) {
	states := []struct {
		st     *desired.State
		prefix string
	}{{benchState(10000), ""}, {benchStateOf(10000, uniqueEndpoint), "unique-"}}
	for b.Loop() {
		for _, s := range states {
			cold, restart := storeHeap(s.st)
			if cold == 0 || restart == 0 {
				b.Fatalf("nothing held: cold %d, restart %d bytes", cold, restart)
			}
			b.ReportMetric(float64(cold)/1e6, s.prefix+"cold-MB")
			b.ReportMetric(float64(restart)/1e6, s.prefix+"restart-MB")
		}
	}
}

// storeHeap returns the bytes of heap the store of st holds after a cold
// sync, and after a restart's read-back and full sync.
func storeHeap(st *desired.State) (cold, restart uint64) {
	sync := func(s *store) *store {
		s.tablePresent = true
		(&Proxier{store: s}).fullClaims(st, newConfig(st))
		for _, u := range s.diff() {
			u.kernelUnit().Done()
		}
		s.clearDirty()
		return s
	}
	var old *store
	cold = heldBy(func() *store { old = sync(newStore()); return old })
	restart = heldBy(func() *store { return sync(readBackFrom(old)) })
	runtime.KeepAlive(old) // alive before and after the restart's figure
	return cold, restart
}

// readBackFrom is a new store read back from what old committed, set by
// set, as knft.Kernel.ReadBack hands a table to its Sink: each element
// spelled into a reused buffer, and a set's end reported only after the
// elements of the dumpsAtOnce-1 sets after it, as if that many were
// dumped at once (knft's workers).
func readBackFrom(old *store) *store {
	const dumpsAtOnce = 4
	s := newStore()
	sink := newStoreSink(s, proxy.IPv4)
	sink.Table()
	for name, c := range old.chains {
		sink.Chain(name, c.hook)
		for _, r := range c.kernel {
			sink.Rule(name, r, c.refs)
		}
	}
	var listed []string
	var buf []byte
	for _, name := range slices.Sorted(maps.Keys(old.sets)) {
		e := old.sets[name]
		list, as := sink.Set(knft.SetInfo{Name: name, IsMap: e.isMap, Size: e.size, Type: e.typ})
		if !list {
			continue
		}
		old.kernelElems(name, as != nil, func(k, v string) {
			buf = append(append(buf[:0], k...), v...)
			sink.Element(name, buf[:len(k)], buf[len(k):])
		})
		if listed = append(listed, name); len(listed) == dumpsAtOnce {
			sink.SetListed(listed[0])
			listed = listed[1:]
		}
	}
	for _, name := range listed {
		sink.SetListed(name)
	}
	sink.finish()
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

// BenchmarkColdSyncPeakHeap reports the peak heap of a cold sync at 10k ×
// 10 (benchState, no kernel) as two figures sampled every millisecond
// while it runs: the most heap in use (what the process's RSS follows),
// and the most heap the GC found live at the end of a cycle. Both start
// from an empty heap (after a GC), so they are the sync's transient plus
// the store it builds. Sampling may miss a short peak; the live figure
// depends on when cycles end.
func BenchmarkColdSyncPeakHeap(b *testing.B) {
	st := benchState(10000)
	for b.Loop() {
		var s *store
		reportPeak(b, func() { s = coldSync(st, func(u *knft.Unit) { u.Done() }) })
		runtime.KeepAlive(s)
	}
}

// BenchmarkRestartPeakHeap is BenchmarkColdSyncPeakHeap for a restart at
// 10k × 10 (benchState, no kernel): the read-back of the cold store's
// kernel side into a new store, as knft hands it over (readBackFrom), and
// the full sync that changes nothing. The figures are above the heap
// before it (the State and the cold store, which stands for the kernel).
func BenchmarkRestartPeakHeap(b *testing.B) {
	st := benchState(10000)
	old := coldSync(st, func(u *knft.Unit) { u.Done() })
	for b.Loop() {
		var s *store
		reportPeak(b, func() {
			s = readBackFrom(old)
			(&Proxier{store: s}).fullClaims(st, newConfig(st))
			if units := s.diff(); len(units) != 0 {
				b.Fatalf("a restart with nothing changed sends %d units", len(units))
			}
			s.clearDirty()
		})
		runtime.KeepAlive(s)
	}
	runtime.KeepAlive(old)
}

// reportPeak reports the peak heap f makes (sampledPeak) above the heap
// in use and live before it, after a GC.
func reportPeak(b *testing.B, f func()) {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	base, baseLive := ms.HeapInuse, ms.HeapAlloc
	inuse, live := sampledPeak(f)
	if inuse <= base {
		b.Fatalf("no heap sampled: %d bytes in use, %d before", inuse, base)
	}
	b.ReportMetric(float64(inuse-base)/1e6, "peak-inuse-MB")
	b.ReportMetric(float64(live-min(live, baseLive))/1e6, "peak-live-MB")
}

var flagPeakHeapProfile = flag.String("peakheap-profile", "", "the …PeakHeap benchmarks write the heap profile of their most live heap to this file (slow: a profile per new peak)")

// sampledPeak runs f and returns the most heap in use (MemStats.HeapInuse:
// objects, live or not yet swept, and the free space of their spans) and
// the most heap live after a GC cycle (runtime/metrics) seen while it ran.
// With -peakheap-profile it writes the heap profile taken when the live
// heap was at its most (a profile shows the heap of the last GC cycle).
func sampledPeak(f func()) (inuse, live uint64) {
	samples := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}, {Name: "/memory/classes/heap/unused:bytes"}, {Name: "/gc/heap/live:bytes"}}
	done := make(chan struct{})
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		tick := time.NewTicker(time.Millisecond)
		defer tick.Stop()
		var profile bytes.Buffer
		defer func() { writePeakProfile(profile.Bytes()) }()
		for {
			metrics.Read(samples)
			inuse = max(inuse, samples[0].Value.Uint64()+samples[1].Value.Uint64())
			if l := samples[2].Value.Uint64(); l > live {
				live = l
				if *flagPeakHeapProfile != "" {
					profile.Reset()
					_ = pprof.WriteHeapProfile(&profile)
				}
			}
			select {
			case <-done:
				return
			case <-tick.C:
			}
		}
	}()
	f()
	close(done)
	<-stopped
	return inuse, live
}

func writePeakProfile(p []byte) {
	if *flagPeakHeapProfile == "" || len(p) == 0 {
		return
	}
	if err := os.WriteFile(*flagPeakHeapProfile, p, 0o644); err != nil {
		fmt.Fprintln(os.Stderr, "peak heap profile:", err)
	}
}
