package nftables

import (
	"slices"

	"sigs.k8s.io/knftables"
)

// elemOp is one element change: a delete of the kernel's element, an add
// of the desired one, or both in that order (nft refuses to add an element
// whose key exists with another value).
type elemOp struct {
	entry    *elemEntry // set and key
	value    string     // desired value, for add
	isMap    bool
	del, add bool
}

func (o *elemOp) numOps() int {
	n := 0
	if o.del {
		n++
	}
	if o.add {
		n++
	}
	return n
}

func (o *elemOp) element(value string) *knftables.Element {
	el := &knftables.Element{Key: splitElem(o.entry.key)}
	if !o.isMap {
		el.Set = o.entry.set()
		return el
	}
	el.Map = o.entry.set()
	if value != "" {
		el.Value = splitElem(value)
	}
	return el
}

func (o *elemOp) write(tx *knftables.Transaction) {
	if o.del {
		tx.Delete(o.element(""))
	}
	if o.add {
		tx.Add(o.element(o.value))
	}
}

func (o *elemOp) done(s *store) {
	if !o.add {
		delete(s.elems[o.entry.set()], o.entry.key)
		return
	}
	o.entry.present, o.entry.kernel = true, o.value
}

// interval reports whether the set is an interval set (its elements are
// ranges that must not overlap).
func (e *setEntry) interval() bool {
	return e.desired != nil && slices.Contains(e.desired.flags, knftables.IntervalFlag)
}

// deletesFirst orders a run of one interval set's changes so that every
// delete precedes every add (stable otherwise).
func deletesFirst(els []*elemEntry) {
	slices.SortStableFunc(els, func(a, b *elemEntry) int {
		_, aAdds := a.desiredValue()
		_, bAdds := b.desiredValue()
		switch {
		case aAdds == bAdds:
			return 0
		case aAdds:
			return 1
		}
		return -1
	})
}

// elemChange is the change entry e needs (diffElem decided that it needs
// one). It depends only on the entry, which nothing changes between the
// diff and the commit of its unit, so a unit keeps entries, not changes.
func elemChange(e *elemEntry, isMap bool) elemOp {
	want, ok := e.desiredValue()
	if !ok {
		return elemOp{entry: e, isMap: isMap, del: true}
	}
	return elemOp{entry: e, value: want, isMap: isMap, del: e.present, add: true}
}

// diffElem returns the phase of the change element e needs, if any.
func (s *store) diffElem(e *elemEntry) (int, bool) {
	want, ok := e.desiredValue()
	set := s.sets[e.set()]
	// Elements of a set being deleted go with it; those of a re-created
	// endpoint map are all in its chain's unit.
	if set == nil || (set.desired == nil && set.present) || s.recreated[e.set()] {
		return 0, false
	}
	rank := elemRank(e.set())
	switch {
	case !ok && !e.present:
		delete(s.elems[e.set()], e.key)
		return 0, false
	case !ok && set.interval():
		// With the set's adds, and before them (diffElems): the kernel
		// refuses an element that overlaps one still there ("File
		// exists"), e.g. a source range widened from /16 to /8.
		return elemAddPhase(rank), true
	case !ok:
		return phaseElemDel + 2 - rank, true
	case e.present && e.kernel == want:
		return 0, false
	}
	return elemAddPhase(rank), true
}
