package nftables

import "strconv"

// slotGroup is one frontend's endpoint slots in a part: elems[start:][:n].
type slotGroup struct {
	start, n int
	frontend string
}

// assignSlots is the step after render that keeps endpoint slots stable:
// render numbers a frontend's endpoints 0…n-1 in State order, and here an
// endpoint keeps the slot the kernel has for it, so replacing one endpoint
// rewrites one element instead of shifting every slot after it; the other
// endpoints fill the free slots in render's order. A map holds one endpoint
// count only, so when the count changes every slot is new anyway. Each
// slot the kernel has gets its store entry (no second lookup at the
// claim). It returns p.
func (s *store) assignSlots(p *part) *part {
	if p == nil {
		return nil
	}
	var buf []byte
	for _, g := range p.slotGroups {
		els := p.elems[g.start : g.start+g.n]
		if g.n == 0 || !s.hasElems(els[0].set) {
			continue
		}
		buf = s.assignGroup(els, g.frontend, buf)
	}
	p.slotGroups = nil
	return p
}

// assignGroup reorders the values of one frontend's slot elements els.
func (s *store) assignGroup(els []elemSpec, frontend string, buf []byte) []byte {
	m := els[0].set
	// at[slot] is the index in els of the value the kernel has in slot,
	// or -1.
	at := make([]int, len(els))
	inOrder := true
	index := valueIndex(els)
	key := append(append(buf[:0], frontend...), elemSep...)
	prefix := len(key)
	for slot := range els {
		key = strconv.AppendUint(key[:prefix], uint64(slot), 10)
		at[slot] = -1
		if e := s.kernelEntry(m, key); e != nil {
			els[slot].key, els[slot].entry = e.key, e // share the kernel's key
			if e.kernel == els[slot].value {
				at[slot] = slot // the usual case: no search
			} else {
				at[slot] = index(e.kernel)
			}
		}
		inOrder = inOrder && at[slot] == slot
	}
	if inOrder {
		return key // a restart, or a change elsewhere: nothing moves
	}
	values := make([]string, len(els))
	for i := range els {
		values[i] = els[i].value
	}
	placed := make([]bool, len(els))
	filled := make([]bool, len(els))
	for slot, i := range at {
		if i >= 0 && !placed[i] {
			els[slot].value, placed[i], filled[slot] = values[i], true, true
		}
	}
	next := 0
	for i, v := range values {
		if placed[i] {
			continue
		}
		for filled[next] {
			next++
		}
		els[next].value, filled[next] = v, true
	}
	return key
}

// valueIndex returns a function that finds the index in els of the
// element whose value is v (-1: none): a scan for a few, a map for many.
func valueIndex(els []elemSpec) func(v string) int {
	if len(els) <= 16 {
		return func(v string) int {
			for i := range els {
				if els[i].value == v {
					return i
				}
			}
			return -1
		}
	}
	index := make(map[string]int, len(els))
	for i := range els {
		index[els[i].value] = i
	}
	return func(v string) int {
		if i, ok := index[v]; ok {
			return i
		}
		return -1
	}
}
