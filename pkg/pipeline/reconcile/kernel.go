package reconcile

// The kernel side of a Table, and the diff of its dirty keys.

// ForgetKernel drops the kernel side, before a read-back fills it again (a
// recovery sync): what this process committed may no longer be true.
func (t *Table[O, K, V]) ForgetKernel() {
	for pos, e := range t.entries.all {
		t.forgetKernelAt(pos, e)
	}
}

// forgetKernelAt drops the kernel side of e, the entry at pos, and makes
// it dirty when the kernel held it.
func (t *Table[O, K, V]) forgetKernelAt(pos int32, e *entry[K, V]) {
	if e.flags&flagKernel != 0 {
		var none V
		e.have = none
		e.flags &^= flagKernel
		t.inKernel--
		t.touch(pos, e)
	}
}

// Kernel returns the kernel's value of k, and whether the kernel holds k.
func (t *Table[O, K, V]) Kernel(k K) (V, bool) {
	var none V
	if t.inKernel == 0 {
		return none, false // a cold table: no key to look up
	}
	pos, ok := t.lookup(k)
	if !ok {
		return none, false
	}
	e := t.entries.at(pos)
	return e.have, e.flags&flagKernel != 0
}

// SetKernel records that the kernel holds k with value v (a read-back, or
// a change made outside a diff).
func (t *Table[O, K, V]) SetKernel(k K, v V) {
	t.setKernelAt(t.lookupOrAdd(k), v)
}

func (t *Table[O, K, V]) setKernelAt(pos int32, v V) {
	e := t.entries.at(pos)
	if e.flags&flagKernel == 0 {
		e.flags |= flagKernel
		t.inKernel++
	}
	e.have = v
}

// DropKernel records that the kernel no longer holds k.
func (t *Table[O, K, V]) DropKernel(k K) {
	if pos, ok := t.lookup(k); ok {
		t.dropKernelAt(pos)
	}
}

func (t *Table[O, K, V]) dropKernelAt(pos int32) {
	e := t.entries.at(pos)
	if e.flags&flagKernel == 0 {
		return
	}
	var none V
	e.have = none
	e.flags &^= flagKernel
	t.inKernel--
	t.removeIfEmpty(pos)
}

// KernelLen is the number of keys the kernel holds.
func (t *Table[O, K, V]) KernelLen() int { return int(t.inKernel) }

// Diff returns the changes the dirty keys need, in the order they were
// touched, and clears the dirty set: an Add for a key claimed and not in
// the kernel, a Delete for one in the kernel and no longer claimed, an
// Update where the kind's Equal says the kernel's value is not the
// claimed one.
func (t *Table[O, K, V]) Diff() []Change[K, V] {
	var out []Change[K, V]
	t.dirtyChanges(true, func(c Change[K, V], _ Pos) { out = append(out, c) })
	return out
}

// DiffFunc is Diff for a backend that orders the changes itself (nftables
// groups them by set and phase): it calls fn with each change and the
// position of its key, in the order the keys were touched, instead of
// collecting them. A backend may keep the position alone until the change
// is made (StateAt, CommitAt).
func (t *Table[O, K, V]) DiffFunc(fn func(Change[K, V], Pos)) {
	t.dirtyChanges(true, fn)
}

// Pos is where a key's entry is in its table, as a diff found it: four
// bytes that reach the entry without hashing the key again. A key with a
// change is claimed or held by the kernel, so its entry stays where it is
// until its change is committed (CommitAt), as long as no claim and no
// other record of the kernel side changes in between: a backend that
// commits each change at its position once the kernel took it, and does
// nothing else to the table meanwhile, may keep positions instead of keys.
type Pos int32

// StateAt returns what the table holds of the key at p (see Pos).
func (t *Table[O, K, V]) StateAt(p Pos) KeyState[K, V] {
	e := t.entries.at(int32(p))
	st := KeyState[K, V]{Key: e.key, Have: e.have, Held: e.flags&flagKernel != 0}
	st.Want, st.Wanted = t.want(int32(p), e)
	return st
}

// CommitAt records that the kernel made the change of the key at p (see
// Pos), whichever it was: it holds what the key's claims want now, or,
// when none claims it, nothing (and the position may go to another key).
func (t *Table[O, K, V]) CommitAt(p Pos) {
	pos := int32(p)
	e := t.entries.at(pos)
	if want, ok := t.want(pos, e); ok {
		t.setKernelAt(pos, want)
		return
	}
	t.dropKernelAt(pos)
}

// Changes calls fn with each change the next Diff returns, in the same
// order, and leaves the keys dirty: a first pass that sizes what the Diff
// then fills.
func (t *Table[O, K, V]) Changes(fn func(Change[K, V])) {
	t.dirtyChanges(false, func(c Change[K, V], _ Pos) { fn(c) })
}

// dirtyChanges calls fn with the change of each dirty key that needs one,
// in the order they were touched; with clearDirty it clears the dirty set
// on the way.
func (t *Table[O, K, V]) dirtyChanges(clearDirty bool, fn func(Change[K, V], Pos)) {
	for _, pos := range t.dirty {
		e := t.entries.at(pos)
		want, wok := t.want(pos, e)
		hok := e.flags&flagKernel != 0
		switch {
		case wok && !hok:
			fn(Change[K, V]{Op: Add, Key: e.key, Want: want}, Pos(pos))
		case !wok && hok:
			fn(Change[K, V]{Op: Delete, Key: e.key, Have: e.have}, Pos(pos))
		case wok && !t.kind.Equal(want, e.have):
			fn(Change[K, V]{Op: Update, Key: e.key, Want: want, Have: e.have}, Pos(pos))
		case wok && clearDirty:
			// Equal: keep the claim's value for both, so that a copy the
			// backend read back (a string) can go.
			e.have = want
		}
		if clearDirty {
			e.flags &^= flagDirty
			t.removeIfEmpty(pos)
		}
	}
	if clearDirty {
		t.emptyDirty()
	}
}

// ClearDirty forgets which keys were touched.
func (t *Table[O, K, V]) ClearDirty() {
	for _, pos := range t.dirty {
		t.entries.at(pos).flags &^= flagDirty
		t.removeIfEmpty(pos)
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
	t.dirty = t.dirty[:0]
}

// removeIfEmpty removes the entry at pos when nothing is left of it.
func (t *Table[O, K, V]) removeIfEmpty(pos int32) {
	if t.entries.at(pos).flags == 0 {
		t.remove(pos)
	}
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
