// Package reconcile is the bookkeeping a backend keeps between its render
// and the kernel: who claims which keyed object (the desired side), what
// the kernel holds (the kernel side, filled by the backend's read-back and
// by every committed change), which keys a sync touched (dirty), and the
// difference of those keys as changes in the order each kind of object
// declares. A backend renders, claims, applies the changes it is given and
// reports what committed; deciding what to write is here, once.
package reconcile

import (
	"slices"
	"unsafe"
)

// Owner is who claims objects: a service port, or the zero value for what
// every port shares. Compare orders owners, so that conflicting claims on
// one key resolve the same way in every sync.
type Owner[O any] interface {
	comparable
	Compare(O) int
}

// Item is one claimed object: its key and the value its owner wants.
type Item[K comparable, V any] struct {
	Key   K
	Value V
}

// Table holds one kind of object: the claims on each key, the kernel's
// value of each key it holds, and the keys touched since the last diff.
// Keys are any comparable type (an address, a protocol and port, a slot),
// so a backend keeps them typed all the way to its kernel client. A Table
// is not safe for concurrent use.
//
// Each owner keeps the positions of the entries its Replace claimed and,
// in a table with values, each claim's value (owners); a table of a
// value-less kind (V of size zero: counted) counts the claims on a key
// (counted.go). The keys' state is packed: one entry per key, in chunks
// (entries.go), which holds the key, the kernel's value, which of the
// owners' claims is its first, and flags; an index of positions
// (index.go) finds a key's entry. A key costs its entry and a few bytes
// of index, no allocation of its own, and the walks of a sync (a full
// sync's reset, the diff of every dirty key, a cold batch) go through the
// entries in order without hashing a key. Only a key that several owners
// claim at once keeps the claims after its first in a slice (more).
type Table[O Owner[O], K comparable, V any] struct {
	kind Kind[K, V]
	// counted: V is value-less, so a claim is only counted (counted.go).
	counted bool
	// claimed and inKernel count the keys with those flags (int32, as
	// positions are: packed beside counted, they keep the table's own
	// record small).
	claimed, inKernel int32
	index             Index[K]
	entries           chunked[entry[K, V]]
	// free lists the positions of entries removed, which new keys take.
	free   []int32
	more   map[int32][]claim
	owners owners[O, K, V]
	// dirty lists the positions of the entries with flagDirty, in the
	// order they were touched. An entry is removed only without flags, so
	// a position listed here stays its key's.
	dirty []int32
	// groups are the entries of each group, when the kind has groups.
	groups *groups
}

// entry is one key's state: the key, the kernel's value (have), its first
// claim (the others are in Table.more) or, in a counted table, the number
// of its claims (first.item), and flags.
type entry[K comparable, V any] struct {
	key   K
	have  V
	first claim
	flags flags
}

type flags uint8

// An entry exists while any flag is set.
const (
	flagClaimed flags = 1 << iota // first is a claim
	flagShared                    // more claims in Table.more
	flagKernel                    // the kernel holds have
	flagDirty                     // the next diff looks at the key
)

// claim is one owner's claim on a key: which of the items of its last
// Replace it is (the index of its value).
type claim struct {
	owner ownerID
	item  int32
}

// NewTable returns an empty table of kind.
func NewTable[O Owner[O], K comparable, V any](kind Kind[K, V]) *Table[O, K, V] {
	var none V
	counted := unsafe.Sizeof(none) == 0
	t := &Table[O, K, V]{kind: kind, counted: counted, more: map[int32][]claim{},
		index: NewIndex(kind.Hash), owners: owners[O, K, V]{index: NewIndex[O](nil)}}
	if kind.Group != nil {
		t.groups = &groups{heads: map[uint32]groupHead{}}
	}
	return t
}

// Replace swaps every claim of o for items (none: o claims nothing any
// more). Every key either side names is dirty. The table keeps the
// positions of the keys' entries and, with values, each item's value, not
// the items: the caller may reuse them at once.
func (t *Table[O, K, V]) Replace(o O, items []Item[K, V]) {
	id, ok := t.owners.lookup(o)
	if ok {
		t.unclaimAll(id)
	}
	switch {
	case len(items) == 0 && ok:
		t.owners.drop(o, id)
		return
	case len(items) == 0:
		return
	case !ok:
		id = t.owners.add(o)
	}
	if t.counted {
		t.claimCounted(id, items)
		return
	}
	c := &t.owners.byID[id]
	at, values := slices.Grow(c.at[:0], len(items)), slices.Grow(c.values[:0], len(items))
	for i, it := range items {
		at = append(at, t.claim(it.Key, claim{owner: id, item: int32(i)}))
		values = append(values, it.Value)
	}
	c.at, c.values = at, values
}

// unclaimAll drops every claim of the owner numbered id, by the positions
// of the entries it claims: no key is hashed again.
func (t *Table[O, K, V]) unclaimAll(id ownerID) {
	for _, pos := range t.owners.byID[id].at {
		if t.counted {
			t.uncount(pos)
		} else {
			t.unclaim(id, pos)
		}
	}
}

// claim adds c on k and returns the position of k's entry. Of one owner's
// claims on a key the first stands: a second is not kept.
func (t *Table[O, K, V]) claim(k K, c claim) int32 {
	pos := t.lookupOrAdd(k)
	e := t.entries.at(pos)
	switch {
	case e.flags&flagClaimed == 0:
		e.first = c
		e.flags |= flagClaimed
		t.claimed++
	case e.first.owner == c.owner || t.sharedIndex(pos, e, c.owner) >= 0:
	default:
		t.more[pos] = append(t.more[pos], c)
		e.flags |= flagShared
	}
	t.touch(pos, e)
	return pos
}

// unclaim drops id's claim on the entry at pos, which it claimed; the
// next claim in the order they came becomes the first. The entry stays
// while claimed, so pos is still its key's.
func (t *Table[O, K, V]) unclaim(id ownerID, pos int32) {
	e := t.entries.at(pos)
	if e.flags&flagClaimed == 0 {
		return
	}
	i := -1 // the first claim
	if e.first.owner != id {
		if i = t.sharedIndex(pos, e, id); i < 0 {
			return // id named k twice: released already
		}
	}
	var rest []claim
	if e.flags&flagShared != 0 {
		rest = t.more[pos]
	}
	switch {
	case i < 0 && len(rest) == 0:
		e.first = claim{}
		e.flags &^= flagClaimed
		t.claimed--
	case i < 0:
		e.first = rest[0]
		t.dropShared(pos, e, 0)
	default:
		t.dropShared(pos, e, i)
	}
	t.touch(pos, e)
}

// sharedIndex is the index of id's claim in more[pos], or -1.
func (t *Table[O, K, V]) sharedIndex(pos int32, e *entry[K, V], id ownerID) int {
	if e.flags&flagShared == 0 {
		return -1
	}
	for i, c := range t.more[pos] {
		if c.owner == id {
			return i
		}
	}
	return -1
}

// dropShared removes more[pos][i], keeping the others' order.
func (t *Table[O, K, V]) dropShared(pos int32, e *entry[K, V], i int) {
	rest := t.more[pos]
	rest = append(rest[:i], rest[i+1:]...)
	if len(rest) == 0 {
		delete(t.more, pos)
		e.flags &^= flagShared
		return
	}
	t.more[pos] = rest
}

// Reserve makes room for n keys ahead of the claims that add them. Only an
// empty table takes the hint (a cold sync: nothing read back, nothing
// claimed), which then claims its keys without growing its storage step
// by step; a table with entries keeps its own.
func (t *Table[O, K, V]) Reserve(n int) {
	if t.entries.n != len(t.free) || n <= 0 {
		return
	}
	t.entries.reserve(n)
	if t.grouped() {
		t.groups.links.reserve(n)
	}
	t.free = t.free[:0]
	t.index.Reset(n)
	t.dirty = slices.Grow(t.dirty[:0], n)
}

// Grow makes room for n keys in all ahead of the claims that add them, in
// a table that holds some already: a cold sync that sizes the table from
// the claims of its first owners. The index is rehashed once to its size
// for n, instead of doubling step by step as the keys come.
func (t *Table[O, K, V]) Grow(n int) {
	t.index.Grow(n, t.keyAt)
	if extra := n - len(t.dirty); extra > 0 {
		t.dirty = slices.Grow(t.dirty, extra)
	}
}

// ReserveOwners makes room for n owners ahead of the Replace calls that
// add them. Only a table without owners that never had room for as many
// takes the hint (a cold sync); one that had keeps its own.
func (t *Table[O, K, V]) ReserveOwners(n int) {
	if t.owners.index.Len() == 0 {
		t.owners.reserve(n)
	}
}

// ResetClaims drops every claim and marks every key dirty, claimed or in
// the kernel: the start of a full sync, which claims everything again and
// so diffs the whole kind.
func (t *Table[O, K, V]) ResetClaims() {
	for pos, e := range t.entries.all {
		if e.flags == 0 {
			continue // a free position
		}
		e.first = claim{}
		e.flags &^= flagClaimed | flagShared
		t.touch(pos, e)
	}
	clear(t.more)
	t.owners.reset()
	t.claimed = 0
}

// MarkAllDirty makes the next diff look at every key, claimed or in the
// kernel, without dropping the claims: after a read-back that a partial
// sync may follow.
func (t *Table[O, K, V]) MarkAllDirty() {
	for pos, e := range t.entries.all {
		if e.flags != 0 {
			t.touch(pos, e)
		}
	}
}

// touch marks e, the entry at pos, dirty.
func (t *Table[O, K, V]) touch(pos int32, e *entry[K, V]) {
	if e.flags&flagDirty == 0 {
		e.flags |= flagDirty
		if len(t.dirty) == cap(t.dirty) {
			// Doubling: append grows a large slice by a quarter, which
			// for a full sync's every key copies it many times.
			t.dirty = slices.Grow(t.dirty, len(t.dirty)+1)
		}
		t.dirty = append(t.dirty, pos)
	}
}

// Want returns the value k should have, and whether anyone claims it. Of
// several claims the first owner's in Compare order wins (the first
// claimed, for one owner's claims); the others wait until it goes.
func (t *Table[O, K, V]) Want(k K) (V, bool) {
	pos, ok := t.lookup(k)
	if !ok {
		var none V
		return none, false
	}
	return t.want(pos, t.entries.at(pos))
}

func (t *Table[O, K, V]) want(pos int32, e *entry[K, V]) (V, bool) {
	if e.flags&flagClaimed == 0 || t.counted {
		var none V
		return none, e.flags&flagClaimed != 0
	}
	best := e.first
	if e.flags&flagShared != 0 {
		for _, c := range t.more[pos] {
			if t.owners.of(c.owner).Compare(t.owners.of(best.owner)) < 0 {
				best = c
			}
		}
	}
	return t.owners.value(best.owner, best.item), true
}

// Len is the number of keys claimed.
func (t *Table[O, K, V]) Len() int { return int(t.claimed) }

// Claimed reports whether anyone claims k.
func (t *Table[O, K, V]) Claimed(k K) bool {
	pos, ok := t.lookup(k)
	return ok && t.entries.at(pos).flags&flagClaimed != 0
}
