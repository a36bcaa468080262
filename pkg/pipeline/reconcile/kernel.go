package reconcile

// The kernel side of a Table, and the diff of its dirty keys.

// ForgetKernel drops the kernel side, before a read-back fills it again (a
// recovery sync): what this process committed may no longer be true.
func (t *Table[O, K, V]) ForgetKernel() {
	var none V
	for k, e := range t.entries {
		if e.flags&flagKernel != 0 {
			e.have = none
			e.flags &^= flagKernel
			t.touch(k, &e)
			t.entries[k] = e
		}
	}
	t.inKernel = 0
}

// Kernel returns the kernel's value of k, and whether the kernel holds k.
func (t *Table[O, K, V]) Kernel(k K) (V, bool) {
	e := t.entries[k]
	return e.have, e.flags&flagKernel != 0
}

// SetKernel records that the kernel holds k with value v (a read-back, or
// a change made outside a diff).
func (t *Table[O, K, V]) SetKernel(k K, v V) {
	e := t.entries[k]
	if e.flags&flagKernel == 0 {
		e.flags |= flagKernel
		t.inKernel++
	}
	e.have = v
	t.entries[k] = e
}

// DropKernel records that the kernel no longer holds k.
func (t *Table[O, K, V]) DropKernel(k K) {
	e := t.entries[k]
	if e.flags&flagKernel == 0 {
		return
	}
	var none V
	e.have = none
	e.flags &^= flagKernel
	t.inKernel--
	t.store(k, e)
}

// KernelLen is the number of keys the kernel holds.
func (t *Table[O, K, V]) KernelLen() int { return t.inKernel }

// KernelKeys yields every key the kernel holds (not to be changed while
// ranging).
func (t *Table[O, K, V]) KernelKeys(yield func(K) bool) {
	for k, e := range t.entries {
		if e.flags&flagKernel != 0 && !yield(k) {
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
	t.dirtyChanges(true, func(c Change[K, V]) { out = append(out, c) })
	return out
}

// dirtyChanges calls fn with the change of each dirty key that needs one,
// in the order they were touched; with clearDirty it clears the dirty set
// on the way.
func (t *Table[O, K, V]) dirtyChanges(clearDirty bool, fn func(Change[K, V])) {
	for _, k := range t.dirty {
		e := t.entries[k]
		want, wok := t.want(k, e)
		hok := e.flags&flagKernel != 0
		switch {
		case wok && !hok:
			fn(Change[K, V]{Op: Add, Key: k, Want: want})
		case !wok && hok:
			fn(Change[K, V]{Op: Delete, Key: k, Have: e.have})
		case wok && !t.kind.Equal(want, e.have):
			fn(Change[K, V]{Op: Update, Key: k, Want: want, Have: e.have})
		}
		if clearDirty {
			e.flags &^= flagDirty
			t.store(k, e)
		}
	}
	if clearDirty {
		t.emptyDirty()
	}
}

// ClearDirty forgets which keys were touched.
func (t *Table[O, K, V]) ClearDirty() {
	for _, k := range t.dirty {
		e := t.entries[k]
		e.flags &^= flagDirty
		t.store(k, e)
	}
	t.emptyDirty()
}

// keptDirty is the most keys whose list a table keeps between diffs: a
// partial sync's list is reused, a full sync's (every key) not kept.
const keptDirty = 1024

// emptyDirty empties the list of dirty keys, whose flags are cleared.
func (t *Table[O, K, V]) emptyDirty() {
	if cap(t.dirty) > keptDirty {
		t.dirty = nil
		return
	}
	clear(t.dirty)
	t.dirty = t.dirty[:0]
}

// store writes e as k's entry, or deletes it when nothing is left of it.
func (t *Table[O, K, V]) store(k K, e entry[V]) {
	if e.flags == 0 {
		delete(t.entries, k)
		return
	}
	t.entries[k] = e
}

// Commit records that the kernel made c: it holds c.Want now, or, for a
// Delete, nothing.
func (t *Table[O, K, V]) Commit(c Change[K, V]) {
	if c.Op == Delete {
		t.DropKernel(c.Key)
	} else {
		t.SetKernel(c.Key, c.Want)
	}
}
