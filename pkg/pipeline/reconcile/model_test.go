package reconcile

import (
	"errors"
	"fmt"
	"hash/maphash"
	"maps"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/svcproxy/svcproxy/pkg/proxy"
)

// naive is the reference the Table is checked against: every owner's
// items as given, and a desired value computed from scratch by looking at
// all of them.
type naive[V comparable] struct {
	parts map[own][]Item[int, V]
}

func (n *naive[V]) desired() map[int]V {
	out := map[int]V{}
	best := map[int]own{}
	for o, its := range n.parts {
		for _, it := range its {
			if b, ok := best[it.Key]; ok && b <= o {
				continue // a lower owner, or this owner's first claim, wins
			}
			best[it.Key], out[it.Key] = o, it.Value
		}
	}
	return out
}

// world drives a Table the way a backend does (Syncs, claims, steps) over
// a fake kernel that sometimes refuses a change or is changed behind the
// backend's back, and checks it against naive after every sync.
type world[V comparable] struct {
	t      *testing.T
	r      *rand.Rand
	syncs  Syncs
	tb     *Table[own, int, V]
	model  naive[V]
	kernel map[int]V // the fake kernel
	failP  float64
	// value makes a value to claim; stray is the value of a key added
	// behind the backend's back.
	value func(*rand.Rand) V
	stray V
	// grouped: the table's kind puts key k in group groupOf(k).
	grouped bool
	// read: the kernel was read back once, so the table's kernel side is
	// the kernel (a failed change is recorded as what the kernel kept).
	read bool
}

// modelGroups is the number of groups of a grouped world's keys.
const modelGroups = 3

func groupOf(k int) uint32 { return uint32(k % modelGroups) }

func (w *world[V]) randomItems() []Item[int, V] {
	var its []Item[int, V]
	for range w.r.IntN(5) {
		its = append(its, Item[int, V]{Key: w.r.IntN(12), Value: w.value(w.r)})
	}
	return its
}

// sync runs one sync of mode whose changed owners get new items.
func (w *world[V]) sync(mode proxy.SyncMode, changed []own) {
	plan, err := w.syncs.Begin(mode, "model")
	if err != nil {
		if !errors.Is(err, proxy.ErrFullSyncNeeded) {
			w.t.Fatalf("Begin(%v): %v", mode, err)
		}
		mode, plan = proxy.FullSync, Plan{ReadBack: true, Full: true}
	}
	if plan.ReadBack {
		w.tb.ForgetKernel()
		for k, v := range w.kernel {
			w.tb.SetKernel(k, v)
		}
		w.syncs.ReadDone()
		w.read = true
	}
	for _, o := range changed {
		w.model.parts[o] = w.randomItems()
	}
	if plan.Full {
		w.tb.ResetClaims()
		// A backend that knows the count hints it (taken only when the
		// table is empty).
		w.tb.Reserve(w.r.IntN(20))
		for o, its := range w.model.parts {
			w.tb.Replace(o, its)
			if w.r.IntN(4) == 0 {
				w.tb.Grow(w.r.IntN(40)) // a hint taken mid-claims
			}
		}
	} else {
		for _, o := range changed {
			w.tb.Replace(o, w.model.parts[o])
		}
	}
	want := w.model.desired()
	w.checkWanted(want)
	failed := false
	switch w.r.IntN(3) {
	case 0:
		err = w.batch(want, &failed)
	case 1:
		err = w.diffFunc(want, &failed)
	default:
		err = RunAll(Each(w.tb, func(c Change[int, V]) (Result[V], error) {
			w.checkChange(c, want)
			if w.r.Float64() < w.failP {
				failed = true
				return Unchanged(c), errors.New("refused")
			}
			w.apply(c)
			return Applied(c), nil
		}))
	}
	if err != nil {
		w.syncs.Failed()
	}
	if failed != (err != nil) {
		w.t.Fatalf("RunAll = %v, but a change failed: %t", err, failed)
	}
	if !failed && w.syncs.Read() {
		w.checkConverged(mode, want)
	}
}

// diffFunc applies the table's changes as nftables does: counted first
// (Changes), then taken (DiffFunc), each spelled from its position
// (StateAt) and committed once the kernel made it (Commit, or CommitAt by
// its position); a refused one stops the rest.
func (w *world[V]) diffFunc(want map[int]V, failed *bool) error {
	var peek, cs []Change[int, V]
	var at []Pos
	w.tb.Changes(func(c Change[int, V]) { peek = append(peek, c) })
	w.tb.DiffFunc(func(c Change[int, V], p Pos) { cs, at = append(cs, c), append(at, p) })
	if fmt.Sprint(peek) != fmt.Sprint(cs) {
		w.t.Fatalf("Changes %v, then DiffFunc %v", peek, cs)
	}
	for i, c := range cs {
		w.checkChange(c, want)
		// What a backend that kept only the position spells the change
		// from.
		st := w.tb.StateAt(at[i])
		if st.Key != c.Key || st.Wanted != (c.Op != Delete) || st.Held != (c.Op != Add) || (st.Wanted && st.Want != c.Want) || (st.Held && st.Have != c.Have) {
			w.t.Fatalf("StateAt(%d) = %+v after the diff's %+v", at[i], st, c)
		}
		if w.r.Float64() < w.failP {
			*failed = true
			return errors.New("refused")
		}
		w.apply(c)
		if w.r.IntN(2) == 0 {
			w.tb.Commit(c)
		} else {
			w.tb.CommitAt(at[i])
		}
	}
	return nil
}

// batch applies the table's changes as a BPF map backend does (Batch: a
// phase whole or not at all, and nothing after a refused one).
func (w *world[V]) batch(want map[int]V, failed *bool) error {
	_, err := RunUntilFailure(Batch(w.tb, func(cs []Change[int, V]) error {
		for _, c := range cs {
			w.checkChange(c, want)
		}
		if w.r.Float64() < w.failP {
			*failed = true
			return errors.New("refused")
		}
		for _, c := range cs {
			w.apply(c)
		}
		return nil
	}))
	return err
}

func (w *world[V]) apply(c Change[int, V]) {
	if c.Op == Delete {
		delete(w.kernel, c.Key)
	} else {
		w.kernel[c.Key] = c.Want
	}
}

// checkChange checks a change against the model: it names what the key
// should be and what the backend last saw of it.
func (w *world[V]) checkChange(c Change[int, V], want map[int]V) {
	v, claimed := want[c.Key]
	if claimed != (c.Op != Delete) || (claimed && v != c.Want) {
		w.t.Fatalf("change %+v, but the model wants %v (claimed %t)", c, v, claimed)
	}
}

func (w *world[V]) checkConverged(mode proxy.SyncMode, want map[int]V) {
	if mode.Full() && !maps.Equal(w.kernel, want) {
		w.t.Fatalf("after a %v sync the kernel is %v, want %v", mode, w.kernel, want)
	}
	for k, v := range w.kernel {
		if have, ok := w.tb.Kernel(k); !ok || have != v {
			w.t.Fatalf("the table's kernel side has %d = %v, %t; the kernel %v", k, have, ok, v)
		}
	}
	if w.tb.KernelLen() != len(w.kernel) {
		w.t.Fatalf("the table's kernel side holds %d keys, the kernel %d", w.tb.KernelLen(), len(w.kernel))
	}
}

// step does one random thing: a partial, full or recovery sync, or a
// change to the kernel behind the backend's back (after which, as the
// syncer does on a lost canary, the next sync is a recovery).
func (w *world[V]) step(op byte) {
	switch op % 8 {
	case 6, 7:
		if w.grouped && w.read {
			w.groupStep(op)
			break
		}
		fallthrough
	case 0, 1, 2:
		w.sync(proxy.PartialSync, []own{own(w.r.IntN(4)), own(w.r.IntN(4))})
	case 3:
		w.sync(proxy.FullSync, []own{own(w.r.IntN(4))})
	case 4:
		w.sync(proxy.RecoverySync, nil)
	case 5:
		k := w.r.IntN(12)
		if _, ok := w.kernel[k]; ok {
			delete(w.kernel, k)
		} else {
			w.kernel[k] = w.stray
		}
		w.sync(proxy.RecoverySync, nil)
	}
}

// groupStep does one thing to one group of a grouped table, as nftables
// does to a set: delete it in the kernel (its elements go with it) and,
// sometimes, re-create it and re-fill it with its claimed keys; or read it
// back again, sometimes after a change of one of its keys behind the
// backend's back.
func (w *world[V]) groupStep(op byte) {
	g := uint32(w.r.IntN(modelGroups))
	if op%8 == 6 {
		for k := range w.kernel {
			if groupOf(k) == g {
				delete(w.kernel, k)
			}
		}
		w.tb.DropKernelGroup(g)
		if w.r.IntN(2) == 0 {
			return
		}
		// Every key GroupKeys yields is claimed now: the kernel holds none.
		for _, k := range slices.Collect(w.tb.GroupKeys(g)) {
			v, _ := w.tb.Want(k)
			w.kernel[k] = v
			w.tb.SetKernel(k, v)
		}
		return
	}
	if w.r.IntN(2) == 0 {
		k := w.r.IntN(12/modelGroups)*modelGroups + int(g)
		if _, ok := w.kernel[k]; ok {
			delete(w.kernel, k)
		} else {
			w.kernel[k] = w.stray
		}
	}
	w.tb.ForgetKernelGroup(g)
	for k, v := range w.kernel {
		if groupOf(k) == g {
			w.tb.SetKernel(k, v)
		}
	}
}

// checkGroups checks a grouped table's groups against the model: each
// group's keys claimed or in the kernel are what GroupKeys yields and
// GroupLen counts, GroupInKernel whether the kernel holds any; and, white-box, each group's list holds its entries,
// and no group without entries keeps a record.
func (w *world[V]) checkGroups() {
	if !w.grouped || !w.read {
		return
	}
	want := w.model.desired()
	for g := range uint32(modelGroups) {
		filter := map[int]bool{}
		for k := range want {
			filter[k] = groupOf(k) == g
		}
		for k := range w.kernel {
			filter[k] = groupOf(k) == g
		}
		maps.DeleteFunc(filter, func(_ int, in bool) bool { return !in })
		got := map[int]bool{}
		for k := range w.tb.GroupKeys(g) {
			if got[k] || !filter[k] {
				w.t.Fatalf("GroupKeys(%d) yields %d (twice: %t); the model's keys of the group are %v", g, k, got[k], filter)
			}
			got[k] = true
		}
		if len(got) != len(filter) || w.tb.GroupLen(g) != len(filter) {
			w.t.Fatalf("group %d: GroupKeys yields %v, GroupLen %d; the model's keys are %v", g, got, w.tb.GroupLen(g), filter)
		}
		if b := w.tb.GroupBound(g); b < len(filter) {
			w.t.Fatalf("group %d: GroupBound %d, below its %d keys", g, b, len(filter))
		}
		w.checkGroupStates(g, got)
		held := false
		for k := range w.kernel {
			held = held || groupOf(k) == g
		}
		if w.tb.GroupInKernel(g) != held {
			w.t.Fatalf("group %d: GroupInKernel %t; the kernel holds %v", g, !held, w.kernel)
		}
	}
	checkGroupLists(w.t, w.tb)
}

// checkGroupStates checks that GroupStates yields the keys of group g
// (keys), each with what Want and Kernel say of it.
func (w *world[V]) checkGroupStates(g uint32, keys map[int]bool) {
	n := 0
	for st := range w.tb.GroupStates(g) {
		n++
		want, wanted := w.tb.Want(st.Key)
		have, held := w.tb.Kernel(st.Key)
		if !keys[st.Key] || fmt.Sprint(st) != fmt.Sprint(KeyState[int, V]{st.Key, want, wanted, have, held}) {
			w.t.Fatalf("GroupStates(%d) yields %+v; Want says %v %t, Kernel %v %t; the group's keys are %v", g, st, want, wanted, have, held, keys)
		}
	}
	if n != len(keys) {
		w.t.Fatalf("GroupStates(%d) yields %d states, the group has %d keys", g, n, len(keys))
	}
}

// checkGroupLists checks, white-box, that each group's list holds the
// positions of exactly its entries, and that only groups with entries
// keep a record.
func checkGroupLists[V any](t testing.TB, tb *Table[own, int, V]) {
	t.Helper()
	count := map[uint32]int{}
	for pos, e := range tb.entries.all {
		if e.flags != 0 {
			count[tb.kind.Group(e.key)]++
			if !slices.Contains(slices.Collect(tb.members(tb.kind.Group(e.key))), pos) {
				t.Fatalf("key %d (position %d) is not in its group's list", e.key, pos)
			}
		}
	}
	for g, h := range tb.groups.heads {
		if n := len(slices.Collect(tb.members(g))); count[g] != int(h.n) || n != int(h.n) {
			t.Fatalf("group %d records %d entries and lists %d; the table holds %d", g, h.n, n, count[g])
		}
	}
	if len(tb.groups.heads) != len(count) {
		t.Fatalf("%d groups keep a record, %d have entries", len(tb.groups.heads), len(count))
	}
}

// valuelessKind is a kind whose objects have no value (an ipset member):
// its table counts the claims on a key rather than keeping them.
var valuelessKind = Kind[int, struct{}]{Name: "valueless", Equal: func(struct{}, struct{}) bool { return true },
	AddPhase: 1, UpdatePhase: 1, DeletePhase: 2}

// runModel drives a table of string values and a counted one (value-less)
// through the same random syncs, each against the naive model.
// Each kind again with groups (the keys spread over modelGroups), whose
// walks of one group are checked against the model after every step; the
// grouped table with values also with a hash of its own (Kind.Hash) that
// sends most keys to a few cells.
func runModel(t *testing.T, seed uint64, ops []byte) {
	str := func(r *rand.Rand) string { return fmt.Sprint(r.IntN(3)) }
	none := func(*rand.Rand) struct{} { return struct{}{} }
	runWorld(t, seed, ops, intKind, str, "stray")
	runWorld(t, seed, ops, valuelessKind, none, struct{}{})
	runWorld(t, seed, ops, withGroups(intKind, groupOf), str, "stray")
	runWorld(t, seed, ops, withGroups(valuelessKind, groupOf), none, struct{}{})
	hashed := withGroups(intKind, groupOf)
	hashed.Hash = func(seed maphash.Seed, k int) uint64 { return maphash.Comparable(seed, k%3) }
	runWorld(t, seed, ops, hashed, str, "stray")
}

func withGroups[V any](k Kind[int, V], group func(int) uint32) Kind[int, V] {
	k.Group = group
	return k
}

func runWorld[V comparable](t *testing.T, seed uint64, ops []byte, kind Kind[int, V], value func(*rand.Rand) V, stray V) {
	w := &world[V]{t: t, r: rand.New(rand.NewPCG(seed, 1)), tb: NewTable[own](kind),
		model: naive[V]{parts: map[own][]Item[int, V]{}}, kernel: map[int]V{}, failP: 0.05, value: value, stray: stray,
		grouped: kind.Group != nil}
	// A process starts on a kernel that holds what a previous one left.
	for range w.r.IntN(6) {
		w.kernel[w.r.IntN(12)] = value(w.r)
	}
	for _, op := range ops {
		w.step(op)
		w.checkGroups()
	}
	// Whatever happened, a recovery sync with no failure converges.
	w.failP = 0
	w.sync(proxy.RecoverySync, nil)
	w.checkConverged(proxy.RecoverySync, w.model.desired())
	w.checkGroups()
}

func TestTableAgainstNaiveModel(t *testing.T) {
	for seed := range uint64(300) {
		r := rand.New(rand.NewPCG(seed, 2))
		ops := make([]byte, 40)
		for i := range ops {
			ops[i] = byte(r.IntN(256))
		}
		runModel(t, seed, ops)
	}
}

func FuzzTableAgainstNaiveModel(f *testing.F) {
	f.Add(uint64(1), []byte{0, 1, 2, 3, 4, 5})
	f.Add(uint64(7), []byte{3, 0, 0, 5, 0, 4, 1})
	f.Fuzz(runModel)
}

// checkWanted checks the table's claims before the diff: it claims as
// many keys as the model wants, each with the value the model wants.
func (w *world[V]) checkWanted(want map[int]V) {
	if w.tb.Len() != len(want) {
		w.t.Fatalf("the table claims %d keys, the model wants %v", w.tb.Len(), want)
	}
	for k, v := range want {
		if got, ok := w.tb.Want(k); !ok || got != v {
			w.t.Fatalf("Want(%d) = %v, %t; the model wants %v", k, got, ok, v)
		}
	}
}
