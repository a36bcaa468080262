package reconcile

// A cold table's batch: the first sync into new maps, or after a
// read-back that found them empty.

// cold reports whether t's diff is an Add of every claimed key and
// nothing else: the kernel holds none of its keys and every key is dirty.
func (t *Table[O, K, V]) cold() bool {
	return t.inKernel == 0 && t.claimed > 0 && len(t.dirty) == t.entries.n-len(t.free)
}

// coldChunk is the most changes a cold batch hands do at once. A first
// sync adds every key of a large table: built a chunk at a time into one
// buffer, the changes take a chunk's memory beside the table rather than
// a copy of every claim.
var coldChunk = 1 << 16

// coldBatch is Batch of a cold table: one Step in the add phase that
// diffs, records and applies in one walk of the dirty keys, a chunk of
// adds (coldChunk) per call of do. A cold sync touches every key of a
// large table, and so each key's entry once rather than in a diff and
// again in a commit. The chunks do took are recorded as held; after one
// fails, the rest of the keys are neither written nor recorded (the
// kernel must be read back, as after any failed batch). The diff is
// taken when the Step runs: a Step that does not run (an earlier one
// failed) leaves its keys dirty for the next diff.
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
		c := coldChunks[O, K, V]{t: t, do: do, adds: make([]Change[K, V], 0, min(int(t.claimed), coldChunk))}
		c.at = make([]int32, 0, cap(c.adds))
		for _, pos := range t.dirty {
			e := t.entries.at(pos)
			e.flags &^= flagDirty
			if want, ok := t.want(pos, e); ok && c.err == nil {
				c.add(pos, Change[K, V]{Op: Add, Key: e.key, Want: want})
			}
			t.removeIfEmpty(pos)
		}
		c.flush()
		t.emptyDirty()
		return c.err
	}
	return []Step{{Phase: t.kind.AddPhase, Kind: t.kind.Name, Len: int(t.claimed), Run: run}}
}

// coldChunks collects a cold batch's adds and hands them to do a chunk
// at a time, recording each chunk do took.
type coldChunks[O Owner[O], K comparable, V any] struct {
	t    *Table[O, K, V]
	do   func([]Change[K, V]) error
	adds []Change[K, V]
	at   []int32 // the position of each add's entry
	err  error   // do's first failure; nothing is written after it
}

func (c *coldChunks[O, K, V]) add(pos int32, ch Change[K, V]) {
	c.adds, c.at = append(c.adds, ch), append(c.at, pos)
	if len(c.adds) == cap(c.adds) {
		c.flush()
	}
}

func (c *coldChunks[O, K, V]) flush() {
	if len(c.adds) == 0 || c.err != nil {
		return
	}
	if c.err = c.do(c.adds); c.err == nil {
		for i, pos := range c.at {
			c.t.setKernelAt(pos, c.adds[i].Want)
		}
	}
	clear(c.adds)
	c.adds, c.at = c.adds[:0], c.at[:0]
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
