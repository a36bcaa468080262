package reconcile

import (
	"hash/maphash"
	"slices"
)

// ownerID numbers an owner within one Table: an entry names its first
// claim's owner in four bytes, however large the owner's type.
type ownerID int32

// owners numbers a table's owners and keeps each one's claims, which say
// what to release on its next Replace: the items its last Replace was
// given or, in a counted table, the positions of the entries they claim.
// The numbers of owners that went are given out again. An owner's value
// is kept once, in its record; an open-addressing index of numbers, as
// for the keys (cells.go), finds it, where a Go map would keep a second
// copy of it.
type owners[O Owner[O], K comparable, V any] struct {
	seed maphash.Seed
	// cells hold an owner's number plus one, 0 for an empty cell; at
	// most half full (cellsFor).
	cells []int32
	byID  []claims[O, K, V]
	free  []ownerID
	n     int // owners numbered
}

// claims are one owner's. A number given out again keeps the room of its
// positions, so that a full sync that claims what the last one did
// allocates none.
type claims[O any, K comparable, V any] struct {
	owner O
	items []Item[K, V]
	at    []int32 // counted tables
}

// forget empties c, keeping the room of its positions.
func (c *claims[O, K, V]) forget() {
	*c = claims[O, K, V]{at: c.at[:0]}
}

func (w *owners[O, K, V]) homeOf(c int32) int {
	return int(maphash.Comparable(w.seed, w.byID[c-1].owner))
}

// probe returns o's cell: the one that holds its number, or, when o has
// none, the empty cell where it would go.
func (w *owners[O, K, V]) probe(o O) (cell int, id ownerID, found bool) {
	mask := len(w.cells) - 1
	for i := int(maphash.Comparable(w.seed, o)) & mask; ; i = (i + 1) & mask {
		c := w.cells[i]
		if c == 0 {
			return i, -1, false
		}
		if w.byID[c-1].owner == o {
			return i, ownerID(c - 1), true
		}
	}
}

// lookup returns o's number.
func (w *owners[O, K, V]) lookup(o O) (ownerID, bool) {
	if w.n == 0 {
		return -1, false
	}
	_, id, ok := w.probe(o)
	return id, ok
}

// add numbers o, which has no number.
func (w *owners[O, K, V]) add(o O) ownerID {
	if c := cellsFor(w.n + 1); c > len(w.cells) {
		w.cells = rehashCells(w.cells, c, w.homeOf)
	}
	cell, _, _ := w.probe(o)
	var id ownerID
	if n := len(w.free); n > 0 {
		id, w.free = w.free[n-1], w.free[:n-1]
	} else {
		id, w.byID = ownerID(len(w.byID)), growOne(w.byID)
	}
	w.byID[id].owner = o
	w.cells[cell] = int32(id) + 1
	w.n++
	return id
}

// growOne lengthens s by one, doubling its room when it is full (as for
// Table.dirty: a full sync numbers every owner). The place it adds keeps
// what it held when s was shortened.
func growOne[T any](s []T) []T {
	if len(s) == cap(s) {
		s = slices.Grow(s, len(s)+1)
	}
	return s[:len(s)+1]
}

// drop forgets o, numbered id, which claims nothing any more.
func (w *owners[O, K, V]) drop(o O, id ownerID) {
	cell, _, _ := w.probe(o)
	emptyCell(w.cells, cell, w.homeOf)
	w.byID[id].forget()
	w.free = append(w.free, id)
	w.n--
}

// reserve makes room for n owners in an empty set of owners, unless it
// has room for as many.
func (w *owners[O, K, V]) reserve(n int) {
	if n <= cap(w.byID) {
		return
	}
	w.cells = make([]int32, cellsFor(n))
	w.byID = slices.Grow(w.byID[:0], n)
}

// of is the owner numbered id.
func (w *owners[O, K, V]) of(id ownerID) O { return w.byID[id].owner }

// items are the claims of the owner numbered id.
func (w *owners[O, K, V]) items(id ownerID) []Item[K, V] { return w.byID[id].items }

// reset forgets every owner.
func (w *owners[O, K, V]) reset() {
	clear(w.cells)
	for i := range w.byID {
		w.byID[i].forget()
	}
	w.byID, w.free, w.n = w.byID[:0], w.free[:0], 0
}
