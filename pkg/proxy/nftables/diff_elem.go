package nftables

import "sigs.k8s.io/knftables"

// elemOp is one element change: a delete of the kernel's element, an add
// of the desired one, or both in that order (nft refuses to add an element
// whose key exists with another value).
type elemOp struct {
	s        *store
	set, key string
	value    string // desired value, for add
	isMap    bool
	del, add bool
	entry    *elemEntry
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
	el := &knftables.Element{Key: splitElem(o.key)}
	if !o.isMap {
		el.Set = o.set
		return el
	}
	el.Map = o.set
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

func (o *elemOp) done() {
	if !o.add {
		delete(o.s.elems[o.set], o.key)
		return
	}
	o.entry.present, o.entry.kernel = true, o.value
}

// diffElem returns the change element e needs and its phase, if any.
func (s *store) diffElem(e *elemEntry) (int, elemOp, bool) {
	want, ok := e.desiredValue()
	set := s.sets[e.set]
	// Elements of a set being deleted go with it; those of a re-created
	// endpoint map are all in its chain's unit.
	if set == nil || (set.desired == nil && set.present) || s.recreated[e.set] {
		return 0, elemOp{}, false
	}
	op := elemOp{s: s, set: e.set, key: e.key, isMap: set.desired.isMap, entry: e}
	rank := elemRank(e.set)
	switch {
	case !ok && !e.present:
		delete(s.elems[e.set], e.key)
		return 0, elemOp{}, false
	case !ok:
		op.del = true
		return phaseElemDel + 2 - rank, op, true
	case e.present && e.kernel == want:
		return 0, elemOp{}, false
	}
	op.del, op.add, op.value = e.present, true, want
	return elemAddPhase(rank), op, true
}
