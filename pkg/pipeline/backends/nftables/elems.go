package nftables

import (
	"hash/maphash"
	"iter"

	"github.com/svcproxy/svcproxy/pkg/pipeline/reconcile"
)

// The elements of every set and map are kept by the reconciliation engine
// (reconcile.Table), in two tables: set elements, which have no value, are
// counted (every claim wants the same, so who claims does not matter);
// map elements keep each owner's value, the lowest owner's winning. Each
// table groups its keys by set (Kind.Group), so the elements of one set
// are walked on their own when it is deleted, re-created and re-filled,
// sized or read back again.

// elemKey is an element's key in the tables: the number of its set
// (store.setID), and its data (datakeys.go) or, for a verdict map, its
// spelling. slots marks an endpoint map's slot group (slots.go): key is
// then the frontend's data, and the value every slot's.
type elemKey struct {
	set   uint32
	slots bool
	key   string
}

// ownerRef is an owner as the element tables know it: its parts' copy of
// its name, the same pointer for every part of the owner while it claims
// (store.replace), so that each table's record of an owner holds 8 bytes,
// not a 72-byte name.
type ownerRef struct{ name *owner }

// Compare orders owners by name, so that conflicting claims resolve the
// same way in every sync.
func (r ownerRef) Compare(o ownerRef) int { return r.name.Compare(*o.name) }

// The two element tables.
type (
	setTable      = reconcile.Table[ownerRef, elemKey, struct{}]
	mapTable      = reconcile.Table[ownerRef, elemKey, string]
	setItem       = reconcile.Item[elemKey, struct{}]
	mapItem       = reconcile.Item[elemKey, string]
	setElemChange = reconcile.Change[elemKey, struct{}]
	mapElemChange = reconcile.Change[elemKey, string]
)

// elemGroup is a key's group: its set.
func elemGroup(k elemKey) uint32 { return k.set }

// hashElemKey hashes k: its data as a string, its set and slots mixed in
// (maphash.Comparable hashes a struct field by field, a large share of a
// cold sync, which hashes every element).
func hashElemKey(seed maphash.Seed, k elemKey) uint64 {
	h := uint64(k.set) << 1
	if k.slots {
		h |= 1
	}
	return maphash.String(seed, k.key) ^ (h * 0x9e3779b97f4a7c15)
}

func newSetTable() *setTable {
	return reconcile.NewTable[ownerRef](reconcile.Kind[elemKey, struct{}]{Name: "set elements",
		Equal: func(struct{}, struct{}) bool { return true }, Group: elemGroup, Hash: hashElemKey})
}

func newMapTable() *mapTable {
	return reconcile.NewTable[ownerRef](reconcile.Kind[elemKey, string]{Name: "map elements",
		Equal: func(want, have string) bool { return want == have }, Group: elemGroup, Hash: hashElemKey})
}

// claimElems replaces o's claims on elements with elems (none: o claims
// no element any more). The tables keep no items, so they are made in
// buffers the next claim reuses.
func (s *store) claimElems(o ownerRef, elems []elemSpec) {
	sets, maps := s.setItems[:0], s.mapItems[:0]
	var set string
	var id uint32
	for i := range elems {
		el := &elems[i]
		// A part's elements come in runs of one set.
		if i == 0 || el.set != set {
			set, id = el.set, s.setID(el.set)
		}
		k := elemKey{set: id, slots: el.slots, key: el.key}
		if el.value == "" && !el.slots {
			sets = append(sets, setItem{Key: k})
		} else {
			maps = append(maps, mapItem{Key: k, Value: el.value})
		}
	}
	s.setElems.Replace(o, sets)
	s.mapElems.Replace(o, maps)
	clear(sets)
	clear(maps)
	s.setItems, s.mapItems = sets[:0], maps[:0]
}

// kernel is the kernel's value of k ("" for a set element), and whether
// the kernel holds it.
func (s *store) kernel(k elemKey) (string, bool) {
	if v, ok := s.mapElems.Kernel(k); ok {
		return v, true
	}
	_, ok := s.setElems.Kernel(k)
	return "", ok
}

// elemKeyOf is the key of element key of set, numbering the set if new.
func (s *store) elemKeyOf(set, key string, slots bool) elemKey {
	return elemKey{set: s.setID(set), slots: slots, key: key}
}

// groupOf is the group of set's elements, and whether any element of set
// was ever claimed or read back.
func (s *store) groupOf(set string) (uint32, bool) {
	id, ok := s.setIDs[set]
	return id, ok
}

// elemState is what the store holds of one element: the value its
// claims want ("" for a set element) and whether any claim it, the
// kernel's value and whether the kernel holds it.
type elemState struct {
	key          elemKey
	want, have   string
	wanted, held bool
}

// groupStates yields the state of every element of set that is claimed or
// in the kernel, of both tables, in no particular order.
func (s *store) groupStates(set string) iter.Seq[elemState] {
	return func(yield func(elemState) bool) {
		g, ok := s.groupOf(set)
		if !ok {
			return
		}
		for st := range s.setElems.GroupStates(g) {
			if !yield(elemState{key: st.Key, wanted: st.Wanted, held: st.Held}) {
				return
			}
		}
		for st := range s.mapElems.GroupStates(g) {
			if !yield(elemState{key: st.Key, want: st.Want, wanted: st.Wanted, have: st.Have, held: st.Held}) {
				return
			}
		}
	}
}

// groupBound is a bound on groupLen in no time (it counts also the keys
// only dirty).
func (s *store) groupBound(set string) int {
	g, ok := s.groupOf(set)
	if !ok {
		return 0
	}
	return s.setElems.GroupBound(g) + s.mapElems.GroupBound(g)
}

// dropKernelSet records that the kernel holds no element of set: it was
// deleted, and its elements with it.
func (s *store) dropKernelSet(set string) {
	if g, ok := s.groupOf(set); ok {
		s.setElems.DropKernelGroup(g)
		s.mapElems.DropKernelGroup(g)
	}
}

// forgetKernelSet forgets what the kernel held of set's elements, before
// it is listed again.
func (s *store) forgetKernelSet(set string) {
	if g, ok := s.groupOf(set); ok {
		s.setElems.ForgetKernelGroup(g)
		s.mapElems.ForgetKernelGroup(g)
	}
}

// setKernel records that the kernel holds k with value v ("": a set
// element).
func (s *store) setKernel(k elemKey, v string) {
	if v == "" && !k.slots {
		s.setElems.SetKernel(k, struct{}{})
		return
	}
	s.mapElems.SetKernel(k, v)
}

// holdsElements reports whether the kernel holds any element, as far as
// the store knows.
func (s *store) holdsElements() bool {
	return s.setElems.KernelLen()+s.mapElems.KernelLen() > 0
}

// hasElems reports whether the kernel may hold elements of set: its set
// exists there (at a cold start none does, and render skips the lookups).
func (s *store) hasElems(set string) bool {
	e := s.sets[set]
	if e == nil || !e.present {
		return false
	}
	g, ok := s.groupOf(set)
	return ok && (s.setElems.GroupInKernel(g) || s.mapElems.GroupInKernel(g))
}

// growLike grows the element tables for total owners' claims, from what
// the first done of them claimed.
func (s *store) growLike(done, total int) {
	scale := func(n int) int { return int(int64(n) * int64(total) / int64(done)) }
	s.setElems.Grow(scale(s.setElems.Len()))
	s.mapElems.Grow(scale(s.mapElems.Len()))
}

// reserveOwners makes room for n owners ahead of a cold sync's claims.
func (s *store) reserveOwners(n int) {
	s.parts.reserve(n)
	s.setElems.ReserveOwners(n)
	s.mapElems.ReserveOwners(n)
}
