package reconcile

import "slices"

// ownerID numbers an owner within one Table: an entry names its first
// claim's owner in four bytes, however large the owner's type.
type ownerID int32

// owners numbers a table's owners and keeps each one's claims, which say
// what to release on its next Replace: the items its last Replace was
// given (byID) or, in a counted table, the positions of the entries they
// claim (at), and nothing of the owner beyond its number, which no
// claim's value needs to be ordered by. The numbers of owners that went
// are given out again.
type owners[O Owner[O], K comparable, V any] struct {
	counted bool
	ids     map[O]ownerID
	byID    []claims[O, K, V]
	// at is each owner's positions in a counted table. A number given
	// out again keeps the room of its positions, so that a full sync
	// that claims what the last one did allocates none.
	at   [][]int32
	free []ownerID
}

// claims are one owner's, in a table that is not counted.
type claims[O any, K comparable, V any] struct {
	owner O
	items []Item[K, V]
}

// add numbers o, which has no number.
func (w *owners[O, K, V]) add(o O) ownerID {
	var id ownerID
	switch n := len(w.free); {
	case n > 0:
		id, w.free = w.free[n-1], w.free[:n-1]
	case w.counted:
		id, w.at = ownerID(len(w.at)), growOne(w.at)
	default:
		id, w.byID = ownerID(len(w.byID)), growOne(w.byID)
	}
	if !w.counted {
		w.byID[id].owner = o
	}
	w.ids[o] = id
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
	delete(w.ids, o)
	if w.counted {
		w.at[id] = w.at[id][:0]
	} else {
		w.byID[id] = claims[O, K, V]{}
	}
	w.free = append(w.free, id)
}

// reserve makes room for n owners, unless there is room for as many.
func (w *owners[O, K, V]) reserve(n int) {
	if n <= max(cap(w.byID), cap(w.at)) {
		return
	}
	w.ids = make(map[O]ownerID, n)
	if w.counted {
		w.at = slices.Grow(w.at[:0], n)
	} else {
		w.byID = slices.Grow(w.byID[:0], n)
	}
}

// of is the owner numbered id.
func (w *owners[O, K, V]) of(id ownerID) O { return w.byID[id].owner }

// items are the claims of the owner numbered id.
func (w *owners[O, K, V]) items(id ownerID) []Item[K, V] { return w.byID[id].items }

// reset forgets every owner.
func (w *owners[O, K, V]) reset() {
	clear(w.ids)
	clear(w.byID)
	for i := range w.at {
		w.at[i] = w.at[i][:0]
	}
	w.byID, w.at, w.free = w.byID[:0], w.at[:0], w.free[:0]
}
