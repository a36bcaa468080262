package nftables

import (
	"bytes"
	"strconv"
	"strings"
)

// An endpoint map's elements are frontend · slot → endpoint, N per
// frontend. The store keeps one entry per frontend and map for them (a
// slot group, elemEntry.slots), not one per slot: at 10k×10 that is 20k
// entries instead of 200k, whose keys, map slots and entries were a
// third of the store's heap. The entry's key is the frontend; its values
// (each claim's, and the kernel's) are the slots' values in slot order,
// joined with slotSep, "" for a slot the kernel lacks. The diff against
// the kernel stays per element (eachSlotChange).
const slotSep = "|"

// slotElemKey is the endpoint-map key frontend · slot.
func slotElemKey(frontend string, slot int) string {
	return frontend + elemSep + strconv.Itoa(slot)
}

// splitSlotKey splits an endpoint-map key, spelled, into frontend and
// slot.
func splitSlotKey(key []byte) (frontend []byte, slot int, ok bool) {
	i := bytes.LastIndex(key, []byte(elemSep))
	if i < 0 {
		return nil, 0, false
	}
	digits := key[i+len(elemSep):]
	if len(digits) == 0 || len(digits) > 9 {
		return nil, 0, false
	}
	for _, d := range digits {
		if d < '0' || d > '9' {
			return nil, 0, false
		}
		slot = slot*10 + int(d-'0')
	}
	return key[:i], slot, true
}

// eachSlot calls f with every slot of a joined value that holds one.
func eachSlot(joined string, f func(slot int, v string)) {
	for slot := 0; joined != ""; slot++ {
		var v string
		v, joined, _ = strings.Cut(joined, slotSep)
		if v != "" {
			f(slot, v)
		}
	}
}

// slotCount is the number of slots of a joined value ("": none).
func slotCount(joined string) int {
	if joined == "" {
		return 0
	}
	return strings.Count(joined, slotSep) + 1
}

// eachSlotChange calls f for every slot of the slot group e whose kernel
// value differs from the desired one ("": none), until f returns false.
func (s *store) eachSlotChange(e *elemEntry, f func(slot int, kernel, want string) bool) bool {
	want, _ := s.desiredValue(e)
	kernel := e.kernel()
	if want == kernel {
		return true
	}
	for slot := 0; want != "" || kernel != ""; slot++ {
		var w, k string
		w, want, _ = strings.Cut(want, slotSep)
		k, kernel, _ = strings.Cut(kernel, slotSep)
		if w != k && !f(slot, k, w) {
			return false
		}
	}
	return true
}

// assignSlots is the step after render that keeps endpoint slots stable:
// render numbers a frontend's endpoints 0…n-1 in State order, and here an
// endpoint keeps the slot the kernel has for it, so replacing one endpoint
// rewrites one element instead of shifting every slot after it; the other
// endpoints fill the free slots in render's order. A map holds one endpoint
// count only, so when the count changes every slot is new anyway. Each
// slot group the kernel has gets its store entry (no second lookup at the
// claim). It returns p.
func (s *store) assignSlots(p *part) *part {
	if p == nil {
		return nil
	}
	for i := range p.elems {
		if el := &p.elems[i]; el.slots && s.hasElems(el.set) {
			s.assignGroup(el)
		}
	}
	return p
}

// assignGroup reorders the slot values of one frontend's group el.
func (s *store) assignGroup(el *elemSpec) {
	e := s.kernelEntry(el.set, el.key)
	if e == nil || !e.slots() {
		return
	}
	el.key, el.entry = e.key, e // share the kernel's key
	if e.kernel() == el.value {
		return // a restart, or a change elsewhere: nothing moves
	}
	values := strings.Split(el.value, slotSep)
	kernel := strings.Split(e.kernel(), slotSep)
	index := valueIndex(values)
	out := make([]string, len(values))
	placed := make([]bool, len(values))
	for slot := range min(len(values), len(kernel)) {
		if i := index(kernel[slot]); i >= 0 && !placed[i] {
			out[slot], placed[i] = values[i], true
		}
	}
	next := 0
	for i, v := range values {
		if placed[i] {
			continue
		}
		for out[next] != "" {
			next++
		}
		out[next] = v
	}
	el.value = strings.Join(out, slotSep)
}

// valueIndex returns a function that finds the index in values of v (-1:
// none, or v is ""): a scan for a few, a map for many.
func valueIndex(values []string) func(v string) int {
	if len(values) <= 16 {
		return func(v string) int {
			if v != "" {
				for i := range values {
					if values[i] == v {
						return i
					}
				}
			}
			return -1
		}
	}
	index := make(map[string]int, len(values))
	for i := range values {
		index[values[i]] = i
	}
	return func(v string) int {
		if i, ok := index[v]; ok && v != "" {
			return i
		}
		return -1
	}
}
