package reconcile

import "hash/maphash"

// The key index of a Table: an open-addressing hash table of positions in
// Table.entries, probed linearly. A key is hashed once per lookup, and an
// absent key's lookup ends at the cell where it goes, so claiming a new
// key is one probe, where a Go map would take a lookup and an insert. The
// index holds positions only (the key is in the entry), so it costs a few
// bytes per key beside the entry itself.

// index maps keys to positions in a Table's entries.
type index struct {
	// cells hold an entry's position plus one, 0 for an empty cell; their
	// number is a power of two at least twice the keys held.
	cells []int32
	used  int
}

// minCells is the size of a table's first index.
const minCells = 8

// cellsFor is the number of cells that hold n keys at most half full.
func cellsFor(n int) int {
	c := minCells
	for c < 2*n {
		c *= 2
	}
	return c
}

func (t *Table[O, K, V]) hash(k K) int {
	// The owners' seed: one for both keeps the table's own record small.
	if t.kind.Hash != nil {
		return int(t.kind.Hash(t.owners.seed, k))
	}
	return int(maphash.Comparable(t.owners.seed, k))
}

// probe returns k's cell: the one that holds its position, or, when k is
// not indexed, the empty cell where it would go.
func (t *Table[O, K, V]) probe(k K) (cell int, pos int32, found bool) {
	mask := len(t.index.cells) - 1
	for i := t.hash(k) & mask; ; i = (i + 1) & mask {
		c := t.index.cells[i]
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
	if len(t.index.cells) == 0 {
		return -1, false
	}
	_, pos, ok := t.probe(k)
	return pos, ok
}

// lookupOrAdd returns k's position in entries, adding an entry without
// flags when k has none; the caller sets a flag on it.
func (t *Table[O, K, V]) lookupOrAdd(k K) int32 {
	if 2*(t.index.used+1) > len(t.index.cells) {
		t.growIndex(t.index.used + 1)
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
	t.index.cells[cell] = pos + 1
	t.index.used++
	if t.grouped() {
		t.join(pos, k)
	}
	return pos
}

// growIndex makes the index hold n keys, rehashing the ones it holds.
func (t *Table[O, K, V]) growIndex(n int) {
	if c := cellsFor(n); c > len(t.index.cells) {
		t.index.cells = rehashCells(t.index.cells, c, t.homeOf)
	}
}

// homeOf is the hash of the key whose cell is c.
func (t *Table[O, K, V]) homeOf(c int32) int { return t.hash(t.entries.at(c - 1).key) }

// remove drops the entry at pos, which has no flags left, from the index
// and frees its position.
func (t *Table[O, K, V]) remove(pos int32) {
	k := t.entries.at(pos).key
	hole, _, _ := t.probe(k)
	emptyCell(t.index.cells, hole, t.homeOf)
	if t.grouped() {
		t.leave(pos, k)
	}
	t.index.used--
	*t.entries.at(pos) = entry[K, V]{}
	t.free = append(t.free, pos)
}
