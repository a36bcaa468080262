// Package reconcile is the bookkeeping a backend keeps between its render
// and the kernel: who claims which keyed object (the desired side), what
// the kernel holds (the kernel side, filled by the backend's read-back and
// by every committed change), which keys a sync touched (dirty), and the
// difference of those keys as changes in the order each kind of object
// declares. A backend renders, claims, applies the changes it is given and
// reports what committed; deciding what to write is here, once.
package reconcile

import "slices"

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
// Each owner's claims are the items its Replace was given, kept as they
// are (owners). A key's map entry (entry) holds the kernel's value, which
// of those items is its first claim, and whether it is dirty: a key costs
// one map slot and no allocation of its own. Only a key that several
// owners claim at once keeps the claims after its first in a slice
// (more).
type Table[O Owner[O], K comparable, V any] struct {
	kind    Kind[K, V]
	entries map[K]entry[V]
	more    map[K][]claim
	owners  owners[O, K, V]
	// claimed and inKernel count the keys with those flags.
	claimed, inKernel int
	// dirty lists the keys with flagDirty, in the order they were
	// touched.
	dirty []K
}

// entry is one key's state: the kernel's value (have), its first claim
// (the others are in Table.more), and flags.
type entry[V any] struct {
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
// Replace it is.
type claim struct {
	owner ownerID
	item  int32
}

// NewTable returns an empty table of kind.
func NewTable[O Owner[O], K comparable, V any](kind Kind[K, V]) *Table[O, K, V] {
	return &Table[O, K, V]{kind: kind, entries: map[K]entry[V]{}, more: map[K][]claim{},
		owners: owners[O, K, V]{ids: map[O]ownerID{}}}
}

// Replace swaps every claim of o for items (none: o claims nothing any
// more). Every key either side names is dirty. The table keeps items
// until o's next Replace or ResetClaims, so the caller must not change it
// after the call.
func (t *Table[O, K, V]) Replace(o O, items []Item[K, V]) {
	id, ok := t.owners.ids[o]
	if ok {
		for _, it := range t.owners.items(id) {
			t.unclaim(id, it.Key)
		}
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
	t.owners.byID[id].items = items
	for i, it := range items {
		t.claim(it.Key, claim{owner: id, item: int32(i)})
	}
}

// claim adds c on k. Of one owner's claims on a key the first stands: a
// second is not kept.
func (t *Table[O, K, V]) claim(k K, c claim) {
	e := t.entries[k]
	switch {
	case e.flags&flagClaimed == 0:
		e.first = c
		e.flags |= flagClaimed
		t.claimed++
	case e.first.owner == c.owner || t.sharedIndex(k, e, c.owner) >= 0:
	default:
		t.more[k] = append(t.more[k], c)
		e.flags |= flagShared
	}
	t.touch(k, &e)
	t.entries[k] = e
}

// unclaim drops id's claim on k; the next claim in the order they came
// becomes the first.
func (t *Table[O, K, V]) unclaim(id ownerID, k K) {
	e := t.entries[k]
	if e.flags&flagClaimed == 0 {
		return
	}
	i := -1 // the first claim
	if e.first.owner != id {
		if i = t.sharedIndex(k, e, id); i < 0 {
			return // id named k twice: released already
		}
	}
	var rest []claim
	if e.flags&flagShared != 0 {
		rest = t.more[k]
	}
	switch {
	case i < 0 && len(rest) == 0:
		e.first = claim{}
		e.flags &^= flagClaimed
		t.claimed--
	case i < 0:
		e.first = rest[0]
		t.dropShared(k, &e, 0)
	default:
		t.dropShared(k, &e, i)
	}
	t.touch(k, &e)
	t.entries[k] = e
}

// sharedIndex is the index of id's claim in more[k], or -1.
func (t *Table[O, K, V]) sharedIndex(k K, e entry[V], id ownerID) int {
	if e.flags&flagShared == 0 {
		return -1
	}
	for i, c := range t.more[k] {
		if c.owner == id {
			return i
		}
	}
	return -1
}

// dropShared removes more[k][i], keeping the others' order.
func (t *Table[O, K, V]) dropShared(k K, e *entry[V], i int) {
	rest := t.more[k]
	rest = append(rest[:i], rest[i+1:]...)
	if len(rest) == 0 {
		delete(t.more, k)
		e.flags &^= flagShared
		return
	}
	t.more[k] = rest
}

// Reserve makes room for n keys ahead of the claims that add them. Only an
// empty table takes the hint (a cold sync: nothing read back, nothing
// claimed), which then claims its keys without growing its map step by
// step; a table with entries keeps its own.
func (t *Table[O, K, V]) Reserve(n int) {
	if len(t.entries) != 0 || n <= 0 {
		return
	}
	t.entries = make(map[K]entry[V], n)
	t.dirty = slices.Grow(t.dirty[:0], n)
}

// ResetClaims drops every claim and marks every key dirty, claimed or in
// the kernel: the start of a full sync, which claims everything again and
// so diffs the whole kind.
func (t *Table[O, K, V]) ResetClaims() {
	for k, e := range t.entries {
		e.first = claim{}
		e.flags &^= flagClaimed | flagShared
		t.touch(k, &e)
		t.entries[k] = e
	}
	clear(t.more)
	t.owners.reset()
	t.claimed = 0
}

// MarkAllDirty makes the next diff look at every key, claimed or in the
// kernel, without dropping the claims: after a read-back that a partial
// sync may follow.
func (t *Table[O, K, V]) MarkAllDirty() {
	for k, e := range t.entries {
		if e.flags&flagDirty == 0 {
			t.touch(k, &e)
			t.entries[k] = e
		}
	}
}

// MarkDirty makes the next diff look at k.
func (t *Table[O, K, V]) MarkDirty(k K) {
	e := t.entries[k]
	if e.flags&flagDirty == 0 {
		t.touch(k, &e)
		t.entries[k] = e
	}
}

// touch marks e, the entry of k, dirty; the caller stores it.
func (t *Table[O, K, V]) touch(k K, e *entry[V]) {
	if e.flags&flagDirty == 0 {
		e.flags |= flagDirty
		if len(t.dirty) == cap(t.dirty) {
			// Doubling: append grows a large slice by a quarter, which
			// for a full sync's every key copies it many times.
			t.dirty = slices.Grow(t.dirty, len(t.dirty)+1)
		}
		t.dirty = append(t.dirty, k)
	}
}

// Want returns the value k should have, and whether anyone claims it. Of
// several claims the first owner's in Compare order wins (the first
// claimed, for one owner's claims); the others wait until it goes.
func (t *Table[O, K, V]) Want(k K) (V, bool) {
	return t.want(k, t.entries[k])
}

func (t *Table[O, K, V]) want(k K, e entry[V]) (V, bool) {
	if e.flags&flagClaimed == 0 {
		var none V
		return none, false
	}
	best := e.first
	if e.flags&flagShared != 0 {
		for _, c := range t.more[k] {
			if t.owners.of(c.owner).Compare(t.owners.of(best.owner)) < 0 {
				best = c
			}
		}
	}
	return t.owners.items(best.owner)[best.item].Value, true
}

// Len is the number of keys claimed.
func (t *Table[O, K, V]) Len() int { return t.claimed }

// Claimed reports whether anyone claims k.
func (t *Table[O, K, V]) Claimed(k K) bool { return t.entries[k].flags&flagClaimed != 0 }
