package reconcile

import "slices"

// ownerID numbers an owner within one Table: an entry names its first
// claim's owner in four bytes, however large the owner's type.
type ownerID int32

// owners numbers a table's owners and keeps each one's claims: the items
// its last Replace was given, whose keys say what to release on the next.
// The numbers of owners that went are given out again.
type owners[O Owner[O], K comparable, V any] struct {
	ids  map[O]ownerID
	byID []claims[O, K, V]
	free []ownerID
}

// claims are one owner's.
type claims[O any, K comparable, V any] struct {
	owner O
	items []Item[K, V]
}

// add numbers o, which has no number.
func (w *owners[O, K, V]) add(o O) ownerID {
	var id ownerID
	if n := len(w.free); n > 0 {
		id, w.free = w.free[n-1], w.free[:n-1]
	} else {
		id = ownerID(len(w.byID))
		if len(w.byID) == cap(w.byID) {
			// Doubling, as for Table.dirty: a full sync numbers
			// every owner.
			w.byID = slices.Grow(w.byID, len(w.byID)+1)
		}
		w.byID = append(w.byID, claims[O, K, V]{})
	}
	w.byID[id].owner = o
	w.ids[o] = id
	return id
}

// drop forgets o, numbered id, which claims nothing any more.
func (w *owners[O, K, V]) drop(o O, id ownerID) {
	delete(w.ids, o)
	w.byID[id] = claims[O, K, V]{}
	w.free = append(w.free, id)
}

// of is the owner numbered id.
func (w *owners[O, K, V]) of(id ownerID) O { return w.byID[id].owner }

// items are the claims of the owner numbered id.
func (w *owners[O, K, V]) items(id ownerID) []Item[K, V] { return w.byID[id].items }

// reset forgets every owner.
func (w *owners[O, K, V]) reset() {
	clear(w.ids)
	clear(w.byID)
	w.byID, w.free = w.byID[:0], w.free[:0]
}
