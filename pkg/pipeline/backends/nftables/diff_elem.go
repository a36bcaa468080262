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
// cold sync: the engine's changes as they are, of the set's table.
type elemRun struct {
	set  string
	sets []setElemChange
	maps []mapElemChange
	// nsets and nmaps count the changes of a first pass, which sizes
	// sets and maps.
	nsets, nmaps int
}

// setChange is the change of a set element c: an add or a delete.
func setChange(c setElemChange) knft.Change {
	return knft.Change{Key: c.Key.key, Del: c.Op == reconcile.Delete, Add: c.Op != reconcile.Delete}
}

// mapChanges yields the changes of a map element c, its key as the table
// keeps it (data in a map that keyLayout names): a delete of the kernel's
// element, an add of the desired one, or both; one per slot whose value
// differs of a slot group.
func mapChanges(c mapElemChange, yield func(knft.Change) bool) bool {
	if c.Key.slots {
		return eachSlotChange(c.Want, c.Have, func(slot int, kernel, want string) bool {
			return yield(knft.Change{Key: slotElemKey(c.Key.key, slot), Value: want, Del: kernel != "", Add: want != ""})
		})
	}
	return yield(knft.Change{Key: c.Key.key, Value: c.Want, Del: c.Op != reconcile.Add, Add: c.Op != reconcile.Delete})
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
		r.sets, r.maps = make([]setElemChange, 0, r.nsets), make([]mapElemChange, 0, r.nmaps)
	}
	cur = nil
	s.setElems.DiffFunc(func(c setElemChange) {
		if r := runOf(c.Key, c.Op); r != nil {
			r.sets = append(r.sets, c)
		}
	})
	cur = nil
	s.mapElems.DiffFunc(func(c mapElemChange) {
		if r := runOf(c.Key, c.Op); r != nil {
			r.maps = append(r.maps, c)
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
	for cs := r.sets; len(cs) > 0; {
		n := min(len(cs), elemRunOps)
		units = append(units, &unit{phase: phase, sortBy: r.set, isMap: isMap, s: s,
			run: &elemRun{set: r.set, sets: cs[:n:n]}, elemOps: n})
		cs = cs[n:]
	}
	for cs := r.maps; len(cs) > 0; {
		u := &unit{phase: phase, sortBy: r.set, isMap: isMap, s: s}
		n := 0
		for ; n < len(cs) && u.elemOps < elemRunOps; n++ {
			u.elemOps += mapChangeOps(cs[n])
		}
		u.run = &elemRun{set: r.set, maps: cs[:n:n]}
		units = append(units, u)
		cs = cs[n:]
	}
	return units
}

// elemUnit is the knft unit of a run of element changes.
func (u *unit) elemUnit() *knft.Unit {
	r, s := u.run, u.s
	return &knft.Unit{Set: r.set, IsMap: u.isMap, Ops: u.elemOps, Layout: unitLayout(r.set, s.desiredSet(r.set), r.firstKey()),
		Elems: func(yield func(knft.Change) bool) {
			for _, c := range r.sets {
				if !yield(setChange(c)) {
					return
				}
			}
			for _, c := range r.maps {
				if !mapChanges(c, yield) {
					return
				}
			}
		},
		Done: func() {
			for _, c := range r.sets {
				s.setElems.Commit(c)
			}
			for _, c := range r.maps {
				s.mapElems.Commit(c)
			}
		}}
}

// firstKey is the first of r's keys that is not empty (a catch-all's
// tells no family), or "".
func (r *elemRun) firstKey() string {
	for _, c := range r.sets {
		if c.Key.key != "" {
			return c.Key.key
		}
	}
	for _, c := range r.maps {
		if c.Key.key != "" {
			return c.Key.key
		}
	}
	return ""
}
