package nftables

import (
	"hash/maphash"
	"math/bits"
)

// entryIndex holds one set's entries by key: an open-addressing hash
// table of entry pointers with linear probing, keyed by each entry's own
// key. A slot is 8 bytes. A map[string]*elemEntry spends 24 a slot (the
// key's string header beside the pointer) and keeps more of them free:
// ≈ 47 bytes per entry, a fifth of the store's heap at 10k × 10
// (docs/performance.md). The table never holds more than maxLoad of its
// slots, so a probe for a missing key ends soon at an empty one.
//
// Removing an entry while ranging over all would skip or repeat others
// (the entries after it move back): collect first.
type entryIndex struct {
	slots []*elemEntry
	n     int
}

// indexSeed seeds every index's hash (per process: the order of all is
// of no one's concern).
var indexSeed = maphash.MakeSeed()

// The table grows (doubles) before it holds more than maxLoadNum /
// maxLoadDen of its slots.
const (
	maxLoadNum = 3
	maxLoadDen = 4
	minSlots   = 8
)

// newEntryIndex returns an index with room for n entries.
func newEntryIndex(n int) *entryIndex {
	x := &entryIndex{}
	x.reserve(n)
	return x
}

// len is the number of entries.
func (x *entryIndex) len() int {
	if x == nil {
		return 0
	}
	return x.n
}

// home is the slot where a probe for key starts, of n slots: the hash
// scaled to [0, n) (a multiply, not a modulo, so n need not be a power
// of two and a reserved table is no bigger than it must be).
func home(key string, n int) int {
	hi, _ := bits.Mul64(maphash.String(indexSeed, key), uint64(n))
	return int(hi)
}

// get returns the entry of key, or nil.
func (x *entryIndex) get(key string) *elemEntry {
	if x == nil || x.n == 0 {
		return nil
	}
	for i := home(key, len(x.slots)); ; i = x.next(i) {
		e := x.slots[i]
		if e == nil || e.key == key {
			return e
		}
	}
}

func (x *entryIndex) next(i int) int {
	if i++; i == len(x.slots) {
		return 0
	}
	return i
}

// add adds e, whose key the index does not hold.
func (x *entryIndex) add(e *elemEntry) {
	if (x.n+1)*maxLoadDen > len(x.slots)*maxLoadNum {
		x.resize(max(2*len(x.slots), minSlots))
	}
	x.place(e)
	x.n++
}

// place puts e in the first free slot from its home.
func (x *entryIndex) place(e *elemEntry) {
	i := home(e.key, len(x.slots))
	for x.slots[i] != nil {
		i = x.next(i)
	}
	x.slots[i] = e
}

// remove removes the entry of key, if any. The entries after it in its
// run move back (backward-shift deletion), so no probe ever has to step
// over a hole.
func (x *entryIndex) remove(key string) {
	if x == nil || x.n == 0 {
		return
	}
	i := home(key, len(x.slots))
	for x.slots[i] == nil || x.slots[i].key != key {
		if x.slots[i] == nil {
			return
		}
		i = x.next(i)
	}
	x.slots[i] = nil
	x.n--
	for j := x.next(i); x.slots[j] != nil; j = x.next(j) {
		// The entry at j may fill the hole at i unless its home lies
		// cyclically in (i, j]: a probe from there would never reach i.
		h := home(x.slots[j].key, len(x.slots))
		if inRange(h, i, j) {
			continue
		}
		x.slots[i], x.slots[j] = x.slots[j], nil
		i = j
	}
}

// inRange reports whether h lies cyclically in (i, j].
func inRange(h, i, j int) bool {
	if i < j {
		return i < h && h <= j
	}
	return i < h || h <= j
}

// reserve makes room for n entries in all.
func (x *entryIndex) reserve(n int) {
	want := (n*maxLoadDen + maxLoadNum - 1) / maxLoadNum
	if want > len(x.slots) {
		x.resize(max(want, minSlots))
	}
}

func (x *entryIndex) resize(n int) {
	old := x.slots
	x.slots = make([]*elemEntry, n)
	for _, e := range old {
		if e != nil {
			x.place(e)
		}
	}
}

// all yields every entry (see entryIndex: no removal meanwhile).
func (x *entryIndex) all(yield func(*elemEntry) bool) {
	if x == nil {
		return
	}
	for _, e := range x.slots {
		if e != nil && !yield(e) {
			return
		}
	}
}
