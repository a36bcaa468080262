package reconcile

// A cold table's batch: the first sync into new maps, or after a
// read-back that found them empty.

// cold reports whether t's diff is an Add of every claimed key and
// nothing else: the kernel holds none of its keys and every key is dirty.
func (t *Table[O, K, V]) cold() bool {
	return t.inKernel == 0 && t.claimed > 0 && len(t.dirty) == len(t.entries)-len(t.free)
}

// coldBatch is Batch of a cold table: one Step in the add phase that
// diffs, records and applies in one walk of the dirty keys. Each claimed
// key is recorded as held with its claimed value as its Add is taken,
// and the records are undone when do fails; a cold sync touches every
// key of a large table, and so each key's entry once rather than in a
// diff and again in a commit. The diff is taken when the Step runs: a
// Step that does not run (an earlier one failed) leaves its keys dirty
// for the next diff.
func coldBatch[O Owner[O], K comparable, V any](t *Table[O, K, V], do func([]Change[K, V]) error) []Step {
	run := func() error {
		if !t.cold() {
			// The table changed since the Step was made: diff it as
			// usual.
			for _, s := range group(t, commitOnSuccess(t, do)) {
				if err := s.Run(); err != nil {
					return err
				}
			}
			return nil
		}
		adds := make([]Change[K, V], 0, t.claimed)
		for _, pos := range t.dirty {
			e := &t.entries[pos]
			e.flags &^= flagDirty
			if want, ok := t.want(pos, e); ok {
				adds = append(adds, Change[K, V]{Op: Add, Key: e.key, Want: want})
				e.have = want
				e.flags |= flagKernel
				t.inKernel++
			}
			t.removeIfEmpty(pos)
		}
		t.emptyDirty()
		if err := do(adds); err != nil {
			for _, c := range adds {
				t.DropKernel(c.Key)
			}
			return err
		}
		return nil
	}
	return []Step{{Phase: t.kind.AddPhase, Kind: t.kind.Name, Len: t.claimed, Run: run}}
}

// commitOnSuccess is do for group: the changes are recorded as made when
// do succeeds, and not at all when it fails.
func commitOnSuccess[O Owner[O], K comparable, V any](t *Table[O, K, V], do func([]Change[K, V]) error) func([]Change[K, V]) error {
	return func(cs []Change[K, V]) error {
		if err := do(cs); err != nil {
			return err
		}
		for _, c := range cs {
			t.Commit(c)
		}
		return nil
	}
}
