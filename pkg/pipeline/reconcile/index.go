package reconcile

import "hash/maphash"

// Index finds values by key for a caller that keeps the values in a slice
// of its own (a table's entries and owners, a backend's records): an
// open-addressing hash table of positions in that slice, probed linearly.
// The index holds positions only, four bytes a cell, and reads a value's
// key back through the caller's keyAt, so a key is kept once, in its
// value, where a Go map would keep a second copy of it in every slot.
//
// A cell holds a position plus one, 0 when empty. The cells are at most
// half full and their number is a power of two; a key's home is its hash
// masked by that number less one.
type Index[K comparable] struct {
	seed  maphash.Seed
	hash  func(maphash.Seed, K) uint64 // nil: maphash.Comparable
	cells []int32
	n     int
}

// KeyAt returns the key of the value at pos, a position the index holds.
type KeyAt[K comparable] func(pos int32) K

// NewIndex returns an empty index that hashes keys with hash (nil: Go's
// hash of comparable values).
func NewIndex[K comparable](hash func(maphash.Seed, K) uint64) Index[K] {
	return Index[K]{seed: maphash.MakeSeed(), hash: hash}
}

// minCells is the size of an index's first cells.
const minCells = 8

// cellsFor is the number of cells that hold n keys at most half full.
func cellsFor(n int) int {
	c := minCells
	for c < 2*n {
		c *= 2
	}
	return c
}

// Len is the number of keys the index holds.
func (x *Index[K]) Len() int { return x.n }

func (x *Index[K]) home(k K) int {
	if x.hash != nil {
		return int(x.hash(x.seed, k))
	}
	return int(maphash.Comparable(x.seed, k))
}

// probe returns k's cell and position, or, when the index holds no k, the
// empty cell where it would go (fill) and found false.
func (x *Index[K]) probe(k K, keyAt KeyAt[K]) (cell int, pos int32, found bool) {
	mask := len(x.cells) - 1
	for i := x.home(k) & mask; ; i = (i + 1) & mask {
		c := x.cells[i]
		if c == 0 {
			return i, -1, false
		}
		if keyAt(c-1) == k {
			return i, c - 1, true
		}
	}
}

// Find returns k's position.
func (x *Index[K]) Find(k K, keyAt KeyAt[K]) (int32, bool) {
	if x.n == 0 {
		return -1, false
	}
	_, pos, ok := x.probe(k, keyAt)
	return pos, ok
}

// probeToAdd is probe with room made for one more key first, so that the
// empty cell it may return can be filled.
func (x *Index[K]) probeToAdd(k K, keyAt KeyAt[K]) (cell int, pos int32, found bool) {
	x.Grow(x.n+1, keyAt)
	return x.probe(k, keyAt)
}

// fill puts pos, whose key has no position here, in cell: the empty cell
// probeToAdd returned for that key, with no change to the index between.
func (x *Index[K]) fill(cell int, pos int32) {
	x.cells[cell] = pos + 1
	x.n++
}

// Add puts pos, whose key k has no position here, in the index.
func (x *Index[K]) Add(k K, pos int32, keyAt KeyAt[K]) {
	cell, _, _ := x.probeToAdd(k, keyAt)
	x.fill(cell, pos)
}

// Remove takes k, which the index holds, out of it and returns its
// position. The cells after its cell in its probe run move back, so that
// no run has a hole (backward-shift deletion).
func (x *Index[K]) Remove(k K, keyAt KeyAt[K]) int32 {
	hole, pos, _ := x.probe(k, keyAt)
	mask := len(x.cells) - 1
	for i := (hole + 1) & mask; x.cells[i] != 0; i = (i + 1) & mask {
		// The cell at i may fill the hole unless its home lies after
		// the hole, cyclically up to i.
		if h := x.home(keyAt(x.cells[i]-1)) & mask; (i-h)&mask >= (i-hole)&mask {
			x.cells[hole] = x.cells[i]
			hole = i
		}
	}
	x.cells[hole] = 0
	x.n--
	return pos
}

// Grow makes room for n keys in all, rehashing the ones held once instead
// of doubling step by step as the keys come.
func (x *Index[K]) Grow(n int, keyAt KeyAt[K]) {
	if 2*n <= len(x.cells) {
		return
	}
	c, old := cellsFor(n), x.cells
	x.cells = make([]int32, c)
	mask := c - 1
	for _, v := range old {
		if v == 0 {
			continue
		}
		i := x.home(keyAt(v-1)) & mask
		for x.cells[i] != 0 {
			i = (i + 1) & mask
		}
		x.cells[i] = v
	}
}

// Reset empties the index, with room for n keys.
func (x *Index[K]) Reset(n int) {
	x.cells, x.n = make([]int32, cellsFor(n)), 0
}

// Clear empties the index, keeping its room.
func (x *Index[K]) Clear() {
	clear(x.cells)
	x.n = 0
}

// The key index of a Table: an absent key's lookup ends at the cell where
// it goes, so claiming a new key is one probe, where a Go map would take
// a lookup and an insert.

// keyAt is the key of the entry at pos.
func (t *Table[O, K, V]) keyAt(pos int32) K { return t.entries.at(pos).key }

// probe is Index.probe with the keys compared in place rather than read
// through a call: every claim of every key looks up its entry, and the
// call was a cold sync's largest cost in the index.
func (t *Table[O, K, V]) probe(k K) (cell int, pos int32, found bool) {
	x := &t.index
	mask := len(x.cells) - 1
	for i := x.home(k) & mask; ; i = (i + 1) & mask {
		c := x.cells[i]
		if c == 0 {
			return i, -1, false
		}
		if t.entries.at(c-1).key == k {
			return i, c - 1, true
		}
	}
}

// lookup returns k's position in entries.
func (t *Table[O, K, V]) lookup(k K) (int32, bool) {
	if t.index.n == 0 {
		return -1, false
	}
	_, pos, ok := t.probe(k)
	return pos, ok
}

// lookupOrAdd returns k's position in entries, adding an entry without
// flags when k has none; the caller sets a flag on it.
func (t *Table[O, K, V]) lookupOrAdd(k K) int32 {
	if 2*(t.index.n+1) > len(t.index.cells) {
		t.index.Grow(t.index.n+1, t.keyAt)
	}
	cell, pos, ok := t.probe(k)
	if ok {
		return pos
	}
	if n := len(t.free); n > 0 {
		pos, t.free = t.free[n-1], t.free[:n-1]
		t.entries.at(pos).key = k
	} else {
		pos = t.entries.add(entry[K, V]{key: k})
	}
	t.index.fill(cell, pos)
	if t.grouped() {
		t.join(pos, k)
	}
	return pos
}

// remove drops the entry at pos, which has no flags left, from the index
// and frees its position.
func (t *Table[O, K, V]) remove(pos int32) {
	k := t.entries.at(pos).key
	t.index.Remove(k, t.keyAt)
	if t.grouped() {
		t.leave(pos, k)
	}
	*t.entries.at(pos) = entry[K, V]{}
	t.free = append(t.free, pos)
}
