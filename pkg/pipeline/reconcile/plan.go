package reconcile

import (
	"errors"
	"hash/maphash"
	"slices"
)

// Op is what a change does to its key.
type Op uint8

// The operations of a change.
const (
	Add    Op = iota // the kernel lacks the key: write Want
	Update           // the kernel holds Have, not Want: change it
	Delete           // the kernel holds Have, which nobody claims
)

// String names the operation for logs and test failures.
func (o Op) String() string {
	return [...]string{"add", "update", "delete"}[o]
}

// Change is one key's difference between the claims and the kernel.
type Change[K comparable, V any] struct {
	Op   Op
	Key  K
	Want V // Add, Update
	Have V // Update, Delete
}

// Kind describes one kind of object: how its values compare, and when its
// changes run. Phases order a sync's changes across kinds so that every
// prefix of it leaves the kernel consistent: what is pointed at is added
// before what points at it and deleted after it (virtual servers before
// the addresses bound to them; chains before the maps whose verdicts name
// them), and within one kind a delete may go before the adds (the
// elements of an interval set, which must not overlap). Changes of one
// phase keep the order their keys were touched in.
type Kind[K comparable, V any] struct {
	// Name names the kind in errors.
	Name string
	// Equal reports whether the kernel's value have is what want asks.
	Equal func(want, have V) bool
	// The phase of each operation.
	AddPhase, UpdatePhase, DeletePhase int
	// Group, when set, is the group of a key: the kernel container that
	// holds it (an nftables set), whose keys the table can then walk on
	// their own (groups.go). Nil: a table without groups, which costs
	// nothing more for them.
	Group func(K) uint32
	// Hash, when set, hashes a key with seed, for a key type that
	// maphash.Comparable hashes slowly (a struct with a string: field by
	// field). Keys that are equal must hash the same. Nil: Comparable.
	Hash func(seed maphash.Seed, k K) uint64
}

// Phase is when a change of op runs: a backend that packs the changes
// into transactions of its own (nftables) orders them by it too.
func (k *Kind[K, V]) Phase(op Op) int {
	switch op {
	case Add:
		return k.AddPhase
	case Update:
		return k.UpdatePhase
	}
	return k.DeletePhase
}

// Step is one phase's changes of one kind, ready to run: Run applies them
// and records in the table what the kernel holds afterwards.
type Step struct {
	Phase int
	Kind  string
	Len   int // the number of changes
	Run   func() error
}

// Result is what the kernel holds for a key after an attempt to apply its
// change: the value, and whether it holds the key at all.
type Result[V any] struct {
	Value   V
	Present bool
}

// Applied is the Result of a change that the kernel made.
func Applied[K comparable, V any](c Change[K, V]) Result[V] {
	return Result[V]{Value: c.Want, Present: c.Op != Delete}
}

// Unchanged is the Result of a change that the kernel refused whole.
func Unchanged[K comparable, V any](c Change[K, V]) Result[V] {
	return Result[V]{Value: c.Have, Present: c.Op != Add}
}

// AllOrNothing is do for Each where the kernel makes a change whole or
// not at all: Applied when do succeeds, else Unchanged.
func AllOrNothing[K comparable, V any](do func(Change[K, V]) error) func(Change[K, V]) (Result[V], error) {
	return func(c Change[K, V]) (Result[V], error) {
		if err := do(c); err != nil {
			return Unchanged(c), err
		}
		return Applied(c), nil
	}
}

// Each diffs t and returns one Step per phase that applies the phase's
// changes one at a time with do. do returns what the kernel holds for the
// key afterwards (Applied, Unchanged, or a value of its own when the
// kernel made part of the change), which the table records; a failed
// change is reported by the Step and the rest of the phase goes on, so one
// bad object does not hold up the others.
func Each[O Owner[O], K comparable, V any](t *Table[O, K, V], do func(Change[K, V]) (Result[V], error)) []Step {
	return group(t, func(cs []Change[K, V]) error {
		var errs []error
		for _, c := range cs {
			r, err := do(c)
			if err != nil {
				errs = append(errs, err)
			}
			if r.Present {
				t.SetKernel(c.Key, r.Value)
			} else {
				t.DropKernel(c.Key)
			}
		}
		return errors.Join(errs...)
	})
}

// Batch diffs t and returns one Step per phase that applies all of the
// phase's changes in one call to do (a batch write of a BPF map). They are
// recorded as made when do succeeds, and not at all when it fails: a
// backend reads the kernel back after a failed sync. A table the kernel
// holds nothing of, every key dirty (a cold sync), is one Step of adds
// (coldBatch), handed to do a chunk at a time. do must not keep the
// slice it is given.
func Batch[O Owner[O], K comparable, V any](t *Table[O, K, V], do func([]Change[K, V]) error) []Step {
	if t.cold() {
		return coldBatch(t, do)
	}
	return group(t, commitOnSuccess(t, do))
}

// group diffs t into one Step per phase, in phase order. The changes are
// counted per phase first, so that they go straight to their place in one
// slice of the size they need: a cold sync diffs every key of a kind.
func group[O Owner[O], K comparable, V any](t *Table[O, K, V], run func([]Change[K, V]) error) []Step {
	phases := t.kind.phases()
	var ends [3]int // of each phase's changes, in phases' order
	t.dirtyChanges(false, func(c Change[K, V], _ Pos) { ends[phases.of(c.Op)]++ })
	for i := 1; i < len(ends); i++ {
		ends[i] += ends[i-1]
	}
	all := make([]Change[K, V], ends[len(ends)-1])
	next := [3]int{0, ends[0], ends[1]}
	t.dirtyChanges(true, func(c Change[K, V], _ Pos) {
		i := phases.of(c.Op)
		all[next[i]] = c
		next[i]++
	})
	var steps []Step
	start := 0
	for i, end := range ends {
		if cs := all[start:end]; len(cs) > 0 {
			steps = append(steps, Step{Phase: phases.phase[i], Kind: t.kind.Name, Len: len(cs), Run: func() error { return run(cs) }})
		}
		start = end
	}
	return steps
}

// phaseOrder is the phases of a kind's three operations, sorted (a phase
// two operations share stands twice, the second place left empty), and
// the place of each operation's phase.
type phaseOrder struct {
	phase [3]int
	index [3]int // by Op
}

func (p *phaseOrder) of(op Op) int { return p.index[op] }

// phases orders k's phases.
func (k *Kind[K, V]) phases() phaseOrder {
	var p phaseOrder
	p.phase = [3]int{k.AddPhase, k.UpdatePhase, k.DeletePhase}
	slices.Sort(p.phase[:])
	for _, op := range []Op{Add, Update, Delete} {
		p.index[op] = slices.Index(p.phase[:], k.Phase(op))
	}
	return p
}

// Order merges the steps of several kinds into phase order (a stable
// sort: of one phase, the kinds in the order given).
func Order(kinds ...[]Step) []Step {
	all := slices.Concat(kinds...)
	slices.SortStableFunc(all, func(a, b Step) int { return a.Phase - b.Phase })
	return all
}

// RunAll runs every step in phase order and returns every failure: a
// backend whose objects are independent of each other (IPVS) programs all
// it can.
func RunAll(kinds ...[]Step) error {
	var errs []error
	for _, s := range Order(kinds...) {
		if err := s.Run(); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// RunUntilFailure runs the steps in phase order and stops at the first
// that fails: the steps after it may rely on it (a map entry that counts
// slots written before). It returns the number of changes of the steps
// that succeeded.
func RunUntilFailure(kinds ...[]Step) (int, error) {
	n := 0
	for _, s := range Order(kinds...) {
		if err := s.Run(); err != nil {
			return n, err
		}
		n += s.Len
	}
	return n, nil
}
