package nftables

import (
	"runtime"
	"slices"
	"testing"

	"github.com/svcproxy/svcproxy/pkg/pipeline/desired"
	"github.com/svcproxy/svcproxy/pkg/pipeline/reconcile"
	"github.com/svcproxy/svcproxy/pkg/proxy"
)

// BenchmarkElemTables measures, at 10k × 10 (benchState), what the set and
// map elements cost in the reconciliation engine's tables instead of the
// store, in the two shapes an element table can take: one table keyed by
// set and key, or one table per set. Each variant is handed the same
// rendered parts and does a cold sync's bookkeeping (every owner's claims,
// the diff, the record of every change as committed) and reports the heap
// it holds afterwards (held-MB: what the sync keeps of the parts beside
// what it built; the store keeps the parts, the tables the items made of
// their elements). "store" is this package's store with the
// whole parts, "store-no-elems" the same without their elements: the
// elements' share of the store is the difference, which is what the
// tables stand against (they hold elements only). Render is outside the
// timing.
func BenchmarkElemTables(b *testing.B) {
	st := benchState(10000)
	variants := []struct {
		name string
		sync func([]renderedPart) any
	}{
		{"store", func(ps []renderedPart) any { return syncStore(ps) }},
		{"store-no-elems", func(ps []renderedPart) any { return syncStore(withoutElems(ps)) }},
		{"one-table", func(ps []renderedPart) any { return syncOneTable(ps) }},
		{"table-per-set", func(ps []renderedPart) any { return syncTablePerSet(ps) }},
	}
	for _, v := range variants {
		b.Run(v.name, func(b *testing.B) {
			b.ReportAllocs()
			var held uint64
			for b.Loop() {
				b.StopTimer()
				before := heapInUse()
				parts := renderParts(b, st)
				b.StartTimer()
				kept := v.sync(parts)
				b.StopTimer()
				held = heapInUse() - before
				runtime.KeepAlive(kept)
				b.StartTimer()
			}
			b.ReportMetric(float64(held)/1e6, "held-MB")
		})
	}
}

// renderedPart is one owner's rendered part.
type renderedPart struct {
	name owner
	pt   *part
}

// renderParts renders st's parts as fullClaims does (the global part
// first, then the service ports in name order), each with a list of
// elements of its own.
func renderParts(b *testing.B, st *desired.State) []renderedPart {
	cfg := newConfig(st)
	names := slices.SortedFunc(st.Services.Keys(), proxy.ServicePortName.Compare)
	parts := []renderedPart{{owner{}, renderGlobal(st, cfg)}}
	for _, name := range names {
		parts = append(parts, renderedPart{name, renderService(cfg, st.Service(name))})
	}
	if cfg.err != nil {
		b.Fatal(cfg.err)
	}
	return parts
}

// withoutElems drops every part's elements.
func withoutElems(parts []renderedPart) []renderedPart {
	for _, p := range parts {
		p.pt.elems = nil
	}
	return parts
}

// syncStore is a cold sync's bookkeeping in the store.
func syncStore(parts []renderedPart) *store {
	s := newStore()
	s.tablePresent = true
	for _, p := range parts {
		s.replace(p.name, p.pt)
	}
	for _, u := range s.diff() {
		u.kernelUnit().Done()
	}
	s.clearDirty()
	return s
}

// setKey is an element's key in one table of every set's elements: its
// set's number and its key.
type setKey struct {
	set uint32
	key string
}

// elemTableKind is the kind of a table of elements. The phases are the
// engine's, not the sets' (elemKind): one table has one kind.
func elemTableKind[K comparable]() reconcile.Kind[K, string] {
	return reconcile.Kind[K, string]{Name: "elements", Equal: func(a, b string) bool { return a == b }, DeletePhase: 1}
}

// syncOneTable claims every part's elements in one table keyed by set and
// key, and commits its cold batch.
func syncOneTable(parts []renderedPart) *reconcile.Table[owner, setKey, string] {
	t := reconcile.NewTable[owner](elemTableKind[setKey]())
	ids := map[string]uint32{}
	for _, p := range parts {
		items := make([]reconcile.Item[setKey, string], len(p.pt.elems))
		for i, el := range p.pt.elems {
			id, ok := ids[el.set]
			if !ok {
				id = uint32(len(ids))
				ids[el.set] = id
			}
			items[i] = reconcile.Item[setKey, string]{Key: setKey{id, el.key}, Value: el.value}
		}
		p.pt.elems = nil
		t.Replace(p.name, items)
	}
	commitCold(t)
	return t
}

// syncTablePerSet claims every part's elements in a table per set (an
// owner's items of one set in one Replace), and commits each table's cold
// batch.
func syncTablePerSet(parts []renderedPart) map[string]*reconcile.Table[owner, string, string] {
	tables := map[string]*reconcile.Table[owner, string, string]{}
	bySet := map[string][]reconcile.Item[string, string]{}
	for _, p := range parts {
		for _, el := range p.pt.elems {
			bySet[el.set] = append(bySet[el.set], reconcile.Item[string, string]{Key: el.key, Value: el.value})
		}
		p.pt.elems = nil
		for set, items := range bySet {
			t := tables[set]
			if t == nil {
				t = reconcile.NewTable[owner](elemTableKind[string]())
				tables[set] = t
			}
			t.Replace(p.name, items)
		}
		clear(bySet)
	}
	for _, t := range tables {
		commitCold(t)
	}
	return tables
}

// commitCold runs t's batch, the kernel taking every change.
func commitCold[K comparable](t *reconcile.Table[owner, K, string]) {
	n := 0
	steps := reconcile.Batch(t, func(cs []reconcile.Change[K, string]) error {
		n += len(cs)
		return nil
	})
	for _, s := range steps {
		if err := s.Run(); err != nil {
			panic(err)
		}
	}
	if n != t.KernelLen() || n != t.Len() {
		panic("the cold batch left keys out")
	}
}
