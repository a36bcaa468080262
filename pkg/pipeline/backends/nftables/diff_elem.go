package nftables

import (
	"maps"
	"slices"
	"strings"

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

// interval reports whether the set is an interval set (its elements are
// ranges that must not overlap).
func (e *setEntry) interval() bool {
	return e.desired != nil && slices.Contains(e.desired.flags, knftables.IntervalFlag)
}

// elemRun is a run of element changes of one set and phase, the bulk of a
// cold sync: the positions in the set's table of the keys whose change the
// diff found. The change of each is spelled, and committed, from its
// position when the run is sent (reconcile.Pos: nothing changes the claims
// in between): 4 bytes a change, where the change itself would take 32 (a
// set element) or 64, and no key hashed again.
type elemRun struct {
	set  string
	sets []reconcile.Pos
	maps []reconcile.Pos
	// del: the set elements' changes are deletes, else adds (a set
	// element has no update, and the two are in phases of their own).
	del bool
	// mapOps are the operations of each of maps' changes.
	mapOps []uint32
	// nsets and nmaps count the changes of a first pass, which sizes
	// sets and maps.
	nsets, nmaps int
}

// mapChanges yields the changes of the map element st, its key as the
// table keeps it (data in a map that keyLayout names): a delete of the
// kernel's element, an add of the desired one, or both; one per slot whose
// value differs of a slot group.
func mapChanges(st reconcile.KeyState[elemKey, string], yield func(knft.Change) bool) bool {
	if st.Key.slots {
		return eachSlotChange(st.Want, st.Have, func(slot int, kernel, want string) bool {
			return yield(knft.Change{Key: slotElemKey(st.Key.key, slot), Value: want, Del: kernel != "", Add: want != ""})
		})
	}
	return yield(knft.Change{Key: st.Key.key, Value: st.Want, Del: st.Held, Add: st.Wanted})
}

// mapChangeOps is the number of operations of c's changes.
func mapChangeOps(c mapElemChange) int {
	if !c.Key.slots {
		if c.Op == reconcile.Update {
			return 2
		}
		return 1
	}
	n := 0
	eachSlotChange(c.Want, c.Have, func(_ int, kernel, want string) bool {
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

// elemPhase returns the phase of change op of element k, or false when
// the change is not the diff's to make: elements of a set being deleted
// go with it; those of a re-created set are all in the unit that
// re-creates it (an endpoint map's chain's, replace.go's), as are the
// verdicts that unit changes.
func (s *store) elemPhase(k elemKey, op reconcile.Op) (int, bool) {
	name := s.setOf(k)
	set := s.sets[name]
	if set == nil || (set.desired == nil && set.present) || s.recreated[name] || s.replacing.holds(k) {
		return 0, false
	}
	kind := elemKind(name, set)
	return kind.Phase(op), true
}

// diffElems returns the element units: runs of one phase and set (sets in
// name order), of at most elemRunOps operations. Elements of one set and
// phase do not depend on each other, so they keep the order they were
// touched in: sorting 330k keys was a fifth of a cold sync's CPU.
func (s *store) diffElems() []*unit {
	type group struct {
		phase int
		set   string
	}
	groups := map[group]*elemRun{}
	var last group
	var cur *elemRun
	runOf := func(k elemKey, op reconcile.Op) *elemRun {
		phase, ok := s.elemPhase(k, op)
		if !ok {
			return nil
		}
		// Consecutive changes are mostly of one group: look it up only
		// when it changes.
		if g := (group{phase, s.setOf(k)}); cur == nil || g != last {
			if last, cur = g, groups[g]; cur == nil {
				cur = &elemRun{set: g.set}
				groups[g] = cur
			}
		}
		return cur
	}
	// Counted first, so that each run's changes go straight into a slice
	// of their number: a cold sync's are every element's.
	s.setElems.Changes(func(c setElemChange) {
		if r := runOf(c.Key, c.Op); r != nil {
			r.nsets++
		}
	})
	cur = nil
	s.mapElems.Changes(func(c mapElemChange) {
		if r := runOf(c.Key, c.Op); r != nil {
			r.nmaps++
		}
	})
	for _, r := range groups {
		r.sets, r.maps = make([]reconcile.Pos, 0, r.nsets), make([]reconcile.Pos, 0, r.nmaps)
		r.mapOps = make([]uint32, 0, r.nmaps)
	}
	cur = nil
	s.setElems.DiffFunc(func(c setElemChange, at reconcile.Pos) {
		if r := runOf(c.Key, c.Op); r != nil {
			r.sets, r.del = append(r.sets, at), c.Op == reconcile.Delete
		}
	})
	cur = nil
	s.mapElems.DiffFunc(func(c mapElemChange, at reconcile.Pos) {
		if r := runOf(c.Key, c.Op); r != nil {
			r.maps, r.mapOps = append(r.maps, at), append(r.mapOps, uint32(mapChangeOps(c)))
		}
	})
	keys := slices.SortedFunc(maps.Keys(groups), func(a, b group) int {
		if a.phase != b.phase {
			return a.phase - b.phase
		}
		return strings.Compare(a.set, b.set)
	})
	var units []*unit
	for _, k := range keys {
		units = s.appendElemUnits(units, k.phase, groups[k])
	}
	return units
}

// appendElemUnits appends r's changes to units, split into units of at
// most elemRunOps operations (a slot group's are never split).
func (s *store) appendElemUnits(units []*unit, phase int, r *elemRun) []*unit {
	isMap := s.sets[r.set].desired.isMap
	for ks := r.sets; len(ks) > 0; {
		n := min(len(ks), elemRunOps)
		units = append(units, &unit{phase: phase, sortBy: r.set, isMap: isMap, s: s,
			run: &elemRun{set: r.set, sets: ks[:n:n], del: r.del}, elemOps: n})
		ks = ks[n:]
	}
	for ks, ops := r.maps, r.mapOps; len(ks) > 0; {
		u := &unit{phase: phase, sortBy: r.set, isMap: isMap, s: s}
		n := 0
		for ; n < len(ks) && u.elemOps < elemRunOps; n++ {
			u.elemOps += int(ops[n])
		}
		u.run = &elemRun{set: r.set, maps: ks[:n:n]}
		units = append(units, u)
		ks, ops = ks[n:], ops[n:]
	}
	return units
}

// elemUnit is the knft unit of a run of element changes.
func (u *unit) elemUnit() *knft.Unit {
	r, s := u.run, u.s
	return &knft.Unit{Set: r.set, IsMap: u.isMap, Ops: u.elemOps, Layout: unitLayout(r.set, s.desiredSet(r.set), s.firstKey(r)),
		Elems: func(yield func(knft.Change) bool) {
			for _, at := range r.sets {
				if !yield(knft.Change{Key: s.setElems.StateAt(at).Key.key, Del: r.del, Add: !r.del}) {
					return
				}
			}
			for _, at := range r.maps {
				if !mapChanges(s.mapElems.StateAt(at), yield) {
					return
				}
			}
		},
		Done: func() {
			for _, at := range r.sets {
				s.setElems.CommitAt(at)
			}
			for _, at := range r.maps {
				s.mapElems.CommitAt(at)
			}
		}}
}

// firstKey is the first of r's keys that is not empty (a catch-all's
// tells no family), or "".
func (s *store) firstKey(r *elemRun) string {
	for _, at := range r.sets {
		if k := s.setElems.StateAt(at).Key.key; k != "" {
			return k
		}
	}
	for _, at := range r.maps {
		if k := s.mapElems.StateAt(at).Key.key; k != "" {
			return k
		}
	}
	return ""
}
