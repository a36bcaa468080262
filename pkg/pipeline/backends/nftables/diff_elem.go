package nftables

import (
	"slices"

	"sigs.k8s.io/knftables"

	"github.com/svcproxy/svcproxy/pkg/knft"
	"github.com/svcproxy/svcproxy/pkg/pipeline/reconcile"
)

// changeOps is the number of operations of c.
func changeOps(c knft.Change) int {
	n := 0
	if c.Del {
		n++
	}
	if c.Add {
		n++
	}
	return n
}

// committed updates the kernel side of e once its changes are committed.
func (s *store) committed(e *elemEntry) {
	want, ok := s.desiredValue(e)
	if !ok {
		s.elems[s.setOf(e)].remove(e.key)
		return
	}
	e.setKernel(want)
}

// interval reports whether the set is an interval set (its elements are
// ranges that must not overlap).
func (e *setEntry) interval() bool {
	return e.desired != nil && slices.Contains(e.desired.flags, knftables.IntervalFlag)
}

// elemChange is the change a plain entry e needs, its key as the store
// keeps it (data in a set that keyLayout names) (diffElem decided that
// it needs one): a delete of the kernel's element, an add of the desired
// one, or both. It depends only on the entry, which nothing changes
// between the diff and the commit of its unit, so a unit keeps entries,
// not changes.
func (s *store) elemChange(e *elemEntry) knft.Change {
	want, ok := s.desiredValue(e)
	if !ok {
		return knft.Change{Key: e.key, Del: true}
	}
	return knft.Change{Key: e.key, Value: want, Del: e.present(), Add: true}
}

// elemChanges yields the changes e needs: elemChange's, or one per slot
// of a slot group whose value differs.
func (s *store) elemChanges(e *elemEntry, yield func(knft.Change) bool) bool {
	if !e.slots() {
		return yield(s.elemChange(e))
	}
	return s.eachSlotChange(e, func(slot int, kernel, want string) bool {
		return yield(knft.Change{Key: slotElemKey(e.key, slot), Value: want, Del: kernel != "", Add: want != ""})
	})
}

// elemOps is the number of operations of e's changes.
func (s *store) elemOps(e *elemEntry) int {
	if !e.slots() {
		// elemChange's, without spelling the key.
		if _, ok := s.desiredValue(e); ok && e.present() {
			return 2
		}
		return 1
	}
	n := 0
	s.eachSlotChange(e, func(_ int, kernel, want string) bool {
		n += changeOps(knft.Change{Del: kernel != "", Add: want != ""})
		return true
	})
	return n
}

// elemKind declares the order of the changes of set's elements (e: its
// set entry): an add or a changed value by the set's rank (elemRank), a
// delete the other way round, after every add; an interval set's deletes
// before any add (phaseRangeDel).
func elemKind(set string, e *setEntry) reconcile.Kind[string, string] {
	rank := elemRank(set)
	k := reconcile.Kind[string, string]{Name: set, AddPhase: elemAddPhase(rank), UpdatePhase: elemAddPhase(rank),
		DeletePhase: phaseElemDel + 2 - rank}
	if e.interval() {
		k.DeletePhase = phaseRangeDel
	}
	return k
}

// diffElem returns the phase of the change element e needs, if any.
func (s *store) diffElem(e *elemEntry) (int, bool) {
	want, ok := s.desiredValue(e)
	set := s.sets[s.setOf(e)]
	// Elements of a set being deleted go with it; those of a re-created
	// set are all in the unit that re-creates it (an endpoint map's
	// chain's, replace.go's), as are the verdicts that unit changes.
	if set == nil || (set.desired == nil && set.present) || s.recreated[s.setOf(e)] || s.replacing.holds(e) {
		return 0, false
	}
	var op reconcile.Op
	switch {
	case !ok && !e.present():
		s.elems[s.setOf(e)].remove(e.key)
		return 0, false
	case !ok:
		op = reconcile.Delete
	case !e.present():
		op = reconcile.Add
	case e.kernel() == want:
		return 0, false
	default:
		op = reconcile.Update
	}
	kind := elemKind(s.setOf(e), set)
	return kind.Phase(op), true
}
