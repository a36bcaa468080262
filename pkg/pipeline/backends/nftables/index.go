package nftables

import (
	"hash/maphash"
	"math/bits"
)

// index holds values by key: an open-addressing hash table of pointers
// with linear probing, keyed by each value's own key (indexKey). A slot is
// 8 bytes. A Go map from key to pointer spends the key beside the pointer
// in every slot (24 bytes for a string, 72 for a service port's name) and
// keeps more of them free. The table never holds more than maxLoad of its slots, so a probe for a
// missing key ends soon at an empty one.
//
// Removing a value while ranging over all would skip or repeat others
// (the values after it move back): collect first.
//
// Each index hashes with a seed of its own: values inserted in another
// index's slot order (a store read back from a store, in tests) would
// otherwise arrive in the order of their homes and pile up into one long
// run, each insert probing to its end.
type index[K comparable, V keyed[K]] struct {
	slots []V
	n     int
	seed  maphash.Seed
}

// keyed is a pointer to a value that knows its key.
type keyed[K comparable] interface {
	comparable
	indexKey() K
}

// partIndex holds each owner's part.
type partIndex = index[owner, *part]

func (p *part) indexKey() owner { return *p.owner }

// The table grows (doubles) before it holds more than maxLoadNum /
// maxLoadDen of its slots. A table made for n values (reserve, compact)
// holds them at sizedLoad, so that a few more (a partial sync's new
// endpoints) do not double it at once.
const (
	maxLoadNum   = 3
	maxLoadDen   = 4
	sizedLoadNum = 5
	sizedLoadDen = 8
	minSlots     = 8
)

// len is the number of values.
func (x *index[K, V]) len() int {
	if x == nil {
		return 0
	}
	return x.n
}

// home is the slot where a probe for key starts: the hash scaled to the
// number of slots (a multiply, not a modulo, so that need not be a power
// of two and a reserved table is no bigger than it must be).
func (x *index[K, V]) home(key K) int {
	hi, _ := bits.Mul64(maphash.Comparable(x.seed, key), uint64(len(x.slots)))
	return int(hi)
}

// get returns the value of key, or nil.
func (x *index[K, V]) get(key K) V {
	var none V
	if x == nil || x.n == 0 {
		return none
	}
	for i := x.home(key); ; i = x.next(i) {
		v := x.slots[i]
		if v == none || v.indexKey() == key {
			return v
		}
	}
}

func (x *index[K, V]) next(i int) int {
	if i++; i == len(x.slots) {
		return 0
	}
	return i
}

// add adds v, whose key the index does not hold.
func (x *index[K, V]) add(v V) {
	if (x.n+1)*maxLoadDen > len(x.slots)*maxLoadNum {
		x.resize(max(2*len(x.slots), minSlots))
	}
	x.place(v)
	x.n++
}

// place puts v in the first free slot from its home.
func (x *index[K, V]) place(v V) {
	var none V
	i := x.home(v.indexKey())
	for x.slots[i] != none {
		i = x.next(i)
	}
	x.slots[i] = v
}

// remove removes the value of key, if any. The values after it in its
// run move back (backward-shift deletion), so no probe ever has to step
// over a hole.
func (x *index[K, V]) remove(key K) {
	var none V
	if x == nil || x.n == 0 {
		return
	}
	i := x.home(key)
	for x.slots[i] == none || x.slots[i].indexKey() != key {
		if x.slots[i] == none {
			return
		}
		i = x.next(i)
	}
	x.slots[i] = none
	x.n--
	for j := x.next(i); x.slots[j] != none; j = x.next(j) {
		// The value at j may fill the hole at i unless its home lies
		// cyclically in (i, j]: a probe from there would never reach i.
		h := x.home(x.slots[j].indexKey())
		if inRange(h, i, j) {
			continue
		}
		x.slots[i], x.slots[j] = x.slots[j], none
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

// reserve makes room for n values in all.
func (x *index[K, V]) reserve(n int) {
	if want := sized(n); want > len(x.slots) {
		x.resize(want)
	}
}

// compact shrinks a table more than a quarter bigger than its sized size
// (growing leaves one as little as 3/8 full) to that size.
func (x *index[K, V]) compact() {
	if x == nil {
		return
	}
	if want := sized(x.n); 4*len(x.slots) > 5*want {
		x.resize(want)
	}
}

// sized is the number of slots that hold n values at sizedLoad.
func sized(n int) int {
	return max((n*sizedLoadDen+sizedLoadNum-1)/sizedLoadNum, minSlots)
}

func (x *index[K, V]) resize(n int) {
	var none V
	if x.slots == nil {
		x.seed = maphash.MakeSeed()
	}
	old := x.slots
	x.slots = make([]V, n)
	for _, v := range old {
		if v != none {
			x.place(v)
		}
	}
}

// all yields every value (see index: no removal meanwhile).
func (x *index[K, V]) all(yield func(V) bool) {
	var none V
	if x == nil {
		return
	}
	for _, v := range x.slots {
		if v != none && !yield(v) {
			return
		}
	}
}
