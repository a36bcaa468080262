// Package reconcile is the bookkeeping a backend keeps between its render
// and the kernel: who claims which keyed object (the desired side), what
// the kernel holds (the kernel side, filled by the backend's read-back and
// by every committed change), which keys a sync touched (dirty), and the
// difference of those keys as changes in the order each kind of object
// declares. A backend renders, claims, applies the changes it is given and
// reports what committed; deciding what to write is here, once.
package reconcile

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

// claim is one owner's claim on a key.
type claim[O any, V any] struct {
	owner O
	value V
}

// Table holds one kind of object: the claims on each key, the kernel's
// value of each key it holds, and the keys touched since the last diff.
// Keys are any comparable type (an address, a protocol and port, a slot),
// so a backend keeps them typed all the way to its kernel client. A Table
// is not safe for concurrent use.
type Table[O Owner[O], K comparable, V any] struct {
	kind   Kind[K, V]
	claims map[K][]claim[O, V]
	owned  map[O][]K
	kernel map[K]V

	dirty   []K
	isDirty map[K]struct{}
}

// NewTable returns an empty table of kind.
func NewTable[O Owner[O], K comparable, V any](kind Kind[K, V]) *Table[O, K, V] {
	return &Table[O, K, V]{
		kind:    kind,
		claims:  map[K][]claim[O, V]{},
		owned:   map[O][]K{},
		kernel:  map[K]V{},
		isDirty: map[K]struct{}{},
	}
}

// Replace swaps every claim of o for items (none: o claims nothing any
// more). Every key either side names is dirty.
func (t *Table[O, K, V]) Replace(o O, items []Item[K, V]) {
	t.release(o)
	if len(items) == 0 {
		return
	}
	keys := make([]K, len(items))
	for i, it := range items {
		keys[i] = it.Key
		t.claims[it.Key] = append(t.claims[it.Key], claim[O, V]{owner: o, value: it.Value})
		t.MarkDirty(it.Key)
	}
	t.owned[o] = keys
}

// release drops every claim of o.
func (t *Table[O, K, V]) release(o O) {
	keys, ok := t.owned[o]
	if !ok {
		return
	}
	delete(t.owned, o)
	for _, k := range keys {
		cs := t.claims[k]
		if len(cs) == 0 {
			continue // o named k twice: released already
		}
		kept := cs[:0]
		for _, c := range cs {
			if c.owner != o {
				kept = append(kept, c)
			}
		}
		clear(cs[len(kept):])
		if len(kept) == 0 {
			delete(t.claims, k)
		} else {
			t.claims[k] = kept
		}
		t.MarkDirty(k)
	}
}

// ResetClaims drops every claim and marks every key dirty, claimed or in
// the kernel: the start of a full sync, which claims everything again and
// so diffs the whole kind.
func (t *Table[O, K, V]) ResetClaims() {
	t.MarkAllDirty()
	clear(t.claims)
	clear(t.owned)
}

// MarkAllDirty makes the next diff look at every key, claimed or in the
// kernel, without dropping the claims: after a read-back that a partial
// sync may follow.
func (t *Table[O, K, V]) MarkAllDirty() {
	for k := range t.claims {
		t.MarkDirty(k)
	}
	for k := range t.kernel {
		t.MarkDirty(k)
	}
}

// ForgetKernel drops the kernel side, before a read-back fills it again (a
// recovery sync): what this process committed may no longer be true.
func (t *Table[O, K, V]) ForgetKernel() {
	for k := range t.kernel {
		t.MarkDirty(k)
	}
	clear(t.kernel)
}

// MarkDirty makes the next diff look at k.
func (t *Table[O, K, V]) MarkDirty(k K) {
	if _, ok := t.isDirty[k]; !ok {
		t.isDirty[k] = struct{}{}
		t.dirty = append(t.dirty, k)
	}
}

// Want returns the value k should have, and whether anyone claims it. Of
// several claims the first owner's in Compare order wins (the first
// claimed, for one owner's claims); the others wait until it goes.
func (t *Table[O, K, V]) Want(k K) (V, bool) {
	cs := t.claims[k]
	if len(cs) == 0 {
		var none V
		return none, false
	}
	best := cs[0]
	for _, c := range cs[1:] {
		if c.owner.Compare(best.owner) < 0 {
			best = c
		}
	}
	return best.value, true
}

// Len is the number of keys claimed.
func (t *Table[O, K, V]) Len() int { return len(t.claims) }

// Claimed reports whether anyone claims k.
func (t *Table[O, K, V]) Claimed(k K) bool { return len(t.claims[k]) > 0 }

// Kernel returns the kernel's value of k, and whether the kernel holds k.
func (t *Table[O, K, V]) Kernel(k K) (V, bool) {
	v, ok := t.kernel[k]
	return v, ok
}

// SetKernel records that the kernel holds k with value v (a read-back, or
// a change made outside a diff).
func (t *Table[O, K, V]) SetKernel(k K, v V) { t.kernel[k] = v }

// DropKernel records that the kernel no longer holds k.
func (t *Table[O, K, V]) DropKernel(k K) { delete(t.kernel, k) }

// KernelLen is the number of keys the kernel holds.
func (t *Table[O, K, V]) KernelLen() int { return len(t.kernel) }

// KernelKeys yields every key the kernel holds (not to be changed while
// ranging).
func (t *Table[O, K, V]) KernelKeys(yield func(K) bool) {
	for k := range t.kernel {
		if !yield(k) {
			return
		}
	}
}

// Diff returns the changes the dirty keys need, in the order they were
// touched, and clears the dirty set: an Add for a key claimed and not in
// the kernel, a Delete for one in the kernel and no longer claimed, an
// Update where the kind's Equal says the kernel's value is not the
// claimed one.
func (t *Table[O, K, V]) Diff() []Change[K, V] {
	var out []Change[K, V]
	for _, k := range t.dirty {
		want, wok := t.Want(k)
		have, hok := t.kernel[k]
		switch {
		case wok && !hok:
			out = append(out, Change[K, V]{Op: Add, Key: k, Want: want})
		case !wok && hok:
			out = append(out, Change[K, V]{Op: Delete, Key: k, Have: have})
		case wok && !t.kind.Equal(want, have):
			out = append(out, Change[K, V]{Op: Update, Key: k, Want: want, Have: have})
		}
	}
	t.ClearDirty()
	return out
}

// ClearDirty forgets which keys were touched.
func (t *Table[O, K, V]) ClearDirty() {
	clear(t.isDirty)
	clear(t.dirty)
	t.dirty = t.dirty[:0]
}

// Commit records that the kernel made c: it holds c.Want now, or, for a
// Delete, nothing.
func (t *Table[O, K, V]) Commit(c Change[K, V]) {
	if c.Op == Delete {
		delete(t.kernel, c.Key)
	} else {
		t.kernel[c.Key] = c.Want
	}
}
