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
// set and key, or one table per set. Each storage is handed the same
// rendered parts and does a sync's bookkeeping (every owner's claims, the
// diff, the record of every change as committed):
//
//   - cold/…: into an empty storage, reporting the heap it holds
//     afterwards (held-MB: what it built, and what it keeps of the parts;
//     the store keeps the parts, the tables the items made of their
//     elements);
//   - resync/…: a full sync of the same State again, which changes
//     nothing (an hourly resync; a restart after its read-back);
//   - partial/…: a partial sync of one service port whose endpoint moved
//     (and back, every other sync), its render included.
//
// "one-table" keeps every element in one table keyed by set and key;
// "two-tables" the set elements (no value) in a table of a value-less
// kind, which counts their claims, and the map elements in one with
// values; "table-per-set" a table per set.
//
// "store" is this package's store with the whole parts, "store-no-elems"
// the same without their elements: the elements' share of the store is
// the difference, which is what the tables stand against (they hold
// elements only). Render is outside the timing.
func BenchmarkElemTables(b *testing.B) {
	st := benchState(10000)
	storages := []struct {
		name string
		new  func() elemStorage
		// noElems: the storage drops the elements.
		noElems bool
	}{
		{"store", func() elemStorage { return &storeElems{s: newStore()} }, false},
		{"store-no-elems", func() elemStorage { return &storeElems{s: newStore(), noElems: true} }, true},
		{"one-table", newOneTable, false},
		{"two-tables", newTwoTables, false},
		{"table-per-set", func() elemStorage { return tablePerSet{} }, false},
	}
	for _, s := range storages {
		b.Run("cold/"+s.name, func(b *testing.B) {
			b.ReportAllocs()
			var held uint64
			for b.Loop() {
				b.StopTimer()
				before := heapInUse()
				parts := renderParts(b, st)
				b.StartTimer()
				kept := s.new()
				kept.sync(parts)
				b.StopTimer()
				held = heapInUse() - before
				runtime.KeepAlive(kept)
				b.StartTimer()
			}
			b.ReportMetric(float64(held)/1e6, "held-MB")
		})
		b.Run("resync/"+s.name, func(b *testing.B) {
			kept := s.new()
			kept.sync(renderParts(b, st))
			b.ReportAllocs()
			for b.Loop() {
				b.StopTimer()
				parts := renderParts(b, st)
				b.StartTimer()
				if n := kept.sync(parts); n != 0 {
					b.Fatalf("a full sync of the same State changes %d elements", n)
				}
			}
		})
		b.Run("partial/"+s.name, func(b *testing.B) { benchmarkElemPartial(b, st, s.new(), !s.noElems) })
	}
}

// elemStorage keeps the elements' claims and kernel side.
type elemStorage interface {
	// sync drops every claim, claims parts' elements, diffs, and records
	// every change as committed; it returns the number of changes.
	sync(parts []renderedPart) int
	// replace replaces one owner's claims by p's, diffs, and records
	// every change as committed; it returns the number of changes.
	replace(p renderedPart) int
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

// storeElems is the store, with the parts' elements or without.
type storeElems struct {
	s       *store
	noElems bool
}

func (x *storeElems) sync(parts []renderedPart) int {
	s := x.s
	s.tablePresent = true
	s.clearDirty()
	s.resetClaims()
	for _, p := range parts {
		if x.noElems {
			p.pt.elems = nil
		}
		s.replace(p.name, p.pt)
	}
	return s.commitDiff()
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

// oneTable is every set's elements in one table keyed by set and key.
type oneTable struct {
	t   *reconcile.Table[owner, setKey, string]
	ids map[string]uint32
}

func newOneTable() elemStorage {
	return &oneTable{t: reconcile.NewTable[owner](elemTableKind[setKey]()), ids: map[string]uint32{}}
}

func (x *oneTable) sync(parts []renderedPart) int {
	x.t.ResetClaims()
	for _, p := range parts {
		x.t.Replace(p.name, x.items(p.pt))
	}
	return commitAll(x.t)
}

// tablePerSet is a table per set; an owner's items of one set go in one
// Replace.
type tablePerSet map[string]*reconcile.Table[owner, string, string]

func (x tablePerSet) sync(parts []renderedPart) int {
	for _, t := range x {
		t.ResetClaims()
	}
	bySet := map[string][]reconcile.Item[string, string]{}
	for _, p := range parts {
		clear(x.claim(p, bySet))
	}
	n := 0
	for _, t := range x {
		n += commitAll(t)
	}
	return n
}

// commitAll runs t's batch (a cold one when t is cold), the kernel taking
// every change, and returns the number of changes.
func commitAll[K comparable, V any](t *reconcile.Table[owner, K, V]) int {
	n := 0
	steps := reconcile.Batch(t, func(cs []reconcile.Change[K, V]) error {
		n += len(cs)
		return nil
	})
	for _, s := range steps {
		if err := s.Run(); err != nil {
			panic(err)
		}
	}
	if t.KernelLen() != t.Len() {
		panic("the batch left keys out")
	}
	return n
}

// benchmarkElemPartial times partial syncs of one service port of st into
// x (after a cold sync of st), its endpoint moved and back by turns; each
// changes elements when x keeps them (elems).
func benchmarkElemPartial(b *testing.B, st *desired.State, x elemStorage, elems bool) {
	x.sync(renderParts(b, st))
	const i = 4242
	moved := withEndpointMoved(st, i, 1)
	cfg, name := newConfig(st), benchName(i)
	b.ReportAllocs()
	k := 0
	for b.Loop() {
		from := st
		if k++; k%2 == 1 {
			from = moved
		}
		if n := x.replace(renderedPart{name, renderService(cfg, from.Service(name))}); (n == 0) == elems {
			b.Fatalf("a moved endpoint changes %d elements", n)
		}
	}
}

func (x *storeElems) replace(p renderedPart) int {
	if x.noElems {
		p.pt.elems = nil
	}
	x.s.clearDirty()
	x.s.replace(p.name, p.pt)
	return x.s.commitDiff()
}

// commitDiff diffs the store and records every unit as committed; it
// returns the number of element entries changed.
func (s *store) commitDiff() int {
	n := 0
	for _, u := range s.diff() {
		n += len(u.els)
		u.kernelUnit().Done()
	}
	s.clearDirty()
	return n
}

func (x *oneTable) replace(p renderedPart) int {
	x.t.Replace(p.name, x.items(p.pt))
	return commitAll(x.t)
}

// items are p's elements as items of the table, which p no longer holds.
func (x *oneTable) items(p *part) []reconcile.Item[setKey, string] {
	items := make([]reconcile.Item[setKey, string], len(p.elems))
	for i, el := range p.elems {
		id, ok := x.ids[el.set]
		if !ok {
			id = uint32(len(x.ids))
			x.ids[el.set] = id
		}
		items[i] = reconcile.Item[setKey, string]{Key: setKey{id, el.key}, Value: el.value}
	}
	p.elems = nil
	return items
}

func (x tablePerSet) replace(p renderedPart) int {
	bySet := x.claim(p, map[string][]reconcile.Item[string, string]{})
	n := 0
	for set, t := range x {
		if _, claimed := bySet[set]; !claimed {
			t.Replace(p.name, nil)
		}
		n += commitAll(t)
	}
	return n
}

// claim replaces p's owner's claims in the tables of the sets p has
// elements in (bySet, empty: their items, which it returns), and takes
// the elements from p.
func (x tablePerSet) claim(p renderedPart, bySet map[string][]reconcile.Item[string, string]) map[string][]reconcile.Item[string, string] {
	for _, el := range p.pt.elems {
		bySet[el.set] = append(bySet[el.set], reconcile.Item[string, string]{Key: el.key, Value: el.value})
	}
	p.pt.elems = nil
	for set, items := range bySet {
		t := x[set]
		if t == nil {
			t = reconcile.NewTable[owner](elemTableKind[string]())
			x[set] = t
		}
		t.Replace(p.name, items)
	}
	return bySet
}

// twoTables is the set elements in a table of a value-less kind, which
// counts their claims and keeps no item, and the map elements in a table
// with values, both keyed by set and key.
type twoTables struct {
	sets *reconcile.Table[owner, setKey, struct{}]
	maps *reconcile.Table[owner, setKey, string]
	ids  map[string]uint32
	// setItems is the buffer of a part's set elements: the value-less
	// table does not keep them.
	setItems []reconcile.Item[setKey, struct{}]
}

func newTwoTables() elemStorage {
	return &twoTables{
		sets: reconcile.NewTable[owner](reconcile.Kind[setKey, struct{}]{Name: "set elements",
			Equal: func(struct{}, struct{}) bool { return true }, DeletePhase: 1}),
		maps: reconcile.NewTable[owner](elemTableKind[setKey]()),
		ids:  map[string]uint32{},
	}
}

func (x *twoTables) sync(parts []renderedPart) int {
	x.sets.ResetClaims()
	x.maps.ResetClaims()
	for _, p := range parts {
		x.claim(p)
	}
	return commitAll(x.sets) + commitAll(x.maps)
}

func (x *twoTables) replace(p renderedPart) int {
	x.claim(p)
	return commitAll(x.sets) + commitAll(x.maps)
}

// claim replaces p's owner's claims in both tables by p's elements, which
// p no longer holds.
func (x *twoTables) claim(p renderedPart) {
	x.setItems = x.setItems[:0]
	var maps []reconcile.Item[setKey, string]
	for _, el := range p.pt.elems {
		id, ok := x.ids[el.set]
		if !ok {
			id = uint32(len(x.ids))
			x.ids[el.set] = id
		}
		k := setKey{id, el.key}
		if el.value == "" {
			x.setItems = append(x.setItems, reconcile.Item[setKey, struct{}]{Key: k})
		} else {
			maps = append(maps, reconcile.Item[setKey, string]{Key: k, Value: el.value})
		}
	}
	p.pt.elems = nil
	x.sets.Replace(p.name, x.setItems)
	x.maps.Replace(p.name, maps)
}
