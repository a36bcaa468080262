package reconcile

import "slices"

// ownerID numbers an owner within one Table: an entry names its first
// claim's owner in four bytes, however large the owner's type.
type ownerID int32

// owners numbers a table's owners and keeps each one's claims, which say
// what to release on its next Replace: the positions of the entries its
// last Replace claimed and, in a table with values, the value of each
// claim. The numbers of owners that went are given out again. An owner's
// value is kept once, in its record, which an Index of numbers finds.
type owners[O Owner[O], K comparable, V any] struct {
	index Index[O]
	byID  []claims[O, V]
	free  []ownerID
}

// claims are one owner's, in the order of the items of its last Replace:
// the positions of the entries claimed, and the values claimed (a table
// with values). A number given out again keeps the room of both, so that
// a full sync that claims what the last one did allocates none.
type claims[O any, V any] struct {
	owner  O
	at     []int32
	values []V
}

// forget empties c, keeping the room of its claims.
func (c *claims[O, V]) forget() {
	clear(c.values) // drop what the values point to
	*c = claims[O, V]{at: c.at[:0], values: c.values[:0]}
}

// ownerAt is the owner numbered id: the key of its cell.
func (w *owners[O, K, V]) ownerAt(id int32) O { return w.byID[id].owner }

// lookup returns o's number.
func (w *owners[O, K, V]) lookup(o O) (ownerID, bool) {
	id, ok := w.index.Find(o, w.ownerAt)
	return ownerID(id), ok
}

// add numbers o, which has no number.
func (w *owners[O, K, V]) add(o O) ownerID {
	cell, _, _ := w.index.probeToAdd(o, w.ownerAt)
	var id ownerID
	if n := len(w.free); n > 0 {
		id, w.free = w.free[n-1], w.free[:n-1]
	} else {
		id, w.byID = ownerID(len(w.byID)), growOne(w.byID)
	}
	w.byID[id].owner = o
	w.index.fill(cell, int32(id))
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
	w.index.Remove(o, w.ownerAt)
	w.byID[id].forget()
	w.free = append(w.free, id)
}

// reserve makes room for n owners in an empty set of owners, unless it
// has room for as many.
func (w *owners[O, K, V]) reserve(n int) {
	if n <= cap(w.byID) {
		return
	}
	w.index.Reset(n)
	w.byID = slices.Grow(w.byID[:0], n)
}

// of is the owner numbered id.
func (w *owners[O, K, V]) of(id ownerID) O { return w.byID[id].owner }

// value is the value of the claim numbered item of the owner numbered id.
func (w *owners[O, K, V]) value(id ownerID, item int32) V { return w.byID[id].values[item] }

// reset forgets every owner.
func (w *owners[O, K, V]) reset() {
	w.index.Clear()
	for i := range w.byID {
		w.byID[i].forget()
	}
	w.byID, w.free = w.byID[:0], w.free[:0]
}
