package nftables

import (
	"encoding/binary"
	"fmt"

	"github.com/svcproxy/svcproxy/pkg/knft"
	"github.com/svcproxy/svcproxy/pkg/pipeline/reconcile"
)

// An endpoint map's elements are frontend · slot → endpoint, N per
// frontend. The store keeps one entry per frontend and map for them (a
// slot group, elemEntry.slots), not one per slot: at 10k×10 that is 20k
// entries instead of 200k, whose keys, map slots and entries were a
// third of the store's heap. The entry's key is the frontend's data (as
// service-ips or service-nodeports key it, datakeys.go); its values (each
// claim's, and the kernel's) are the slots' values in slot order, each a
// length byte and then the value's data (an address · port as the kernel
// holds it), a length of 0 for a slot the kernel lacks. The diff against
// the kernel stays per element (eachSlotChange), and an element's key is
// the frontend's data followed by the slot's (slotElemKey).

// slotLen is the length of a slot's data: numgen's 32-bit integer, in
// host byte order.
const slotLen = 4

// slotElemKey is the data of the endpoint-map key frontend · slot.
func slotElemKey(frontend string, slot int) string {
	var b [64]byte
	return string(binary.NativeEndian.AppendUint32(append(b[:0], frontend...), uint32(slot)))
}

// splitSlotKey splits the data of an endpoint-map key into the frontend's
// and the slot; a key too short for both (a catch-all's) is none.
func splitSlotKey(key []byte) (frontend []byte, slot int, ok bool) {
	if len(key) <= slotLen {
		return nil, 0, false
	}
	n := len(key) - slotLen
	v := binary.NativeEndian.Uint32(key[n:])
	if v > 1<<30 {
		return nil, 0, false
	}
	return key[:n], int(v), true
}

// spellSlot is the element of a slot group's slot, data in layout (an
// endpoint map's), spelled: the frontend's data and the slot as the key,
// value as the value.
func spellSlot(layout *knft.Layout, frontend string, slot int, value string) (string, string) {
	key, v, err := layout.SpellElem(slotElemKey(frontend, slot), value)
	if err != nil {
		// Render made both as this layout's data: a bug, which nft
		// will refuse by name.
		return fmt.Sprintf("%x", slotElemKey(frontend, slot)), fmt.Sprintf("%x", value)
	}
	return key, v
}

// appendSlot appends a slot's value v ("": none) to a group's value.
func appendSlot(b []byte, v []byte) []byte {
	return append(append(b, byte(len(v))), v...)
}

// cutSlot returns the first slot's value of a group's value and the rest.
func cutSlot(joined string) (v, rest string) {
	n := min(int(joined[0]), len(joined)-1)
	return joined[1 : 1+n], joined[1+n:]
}

// eachSlot calls f with every slot of a group's value that holds one.
func eachSlot(joined string, f func(slot int, v string)) {
	for slot := 0; joined != ""; slot++ {
		var v string
		v, joined = cutSlot(joined)
		if v != "" {
			f(slot, v)
		}
	}
}

// slotCount is the number of slots of a group's value ("": none).
func slotCount(joined string) int {
	n := 0
	for ; joined != ""; n++ {
		_, joined = cutSlot(joined)
	}
	return n
}

// splitSlots is a group's value as one value per slot ("": none).
func splitSlots(joined string) []string {
	out := make([]string, 0, slotCount(joined))
	for joined != "" {
		var v string
		v, joined = cutSlot(joined)
		out = append(out, v)
	}
	return out
}

// joinSlots is the group's value of slots' values ("": none).
func joinSlots(values []string) string {
	n := len(values)
	for _, v := range values {
		n += len(v)
	}
	b := make([]byte, 0, n)
	for _, v := range values {
		b = appendSlot(b, []byte(v))
	}
	return string(b)
}

// eachSlotChange calls f for every slot of a slot group whose kernel
// value (of the group's value kernel) differs from the desired one (of
// want; "": none), until f returns false.
func eachSlotChange(want, kernel string, f func(slot int, kernel, want string) bool) bool {
	if want == kernel {
		return true
	}
	for slot := 0; want != "" || kernel != ""; slot++ {
		var w, k string
		if want != "" {
			w, want = cutSlot(want)
		}
		if kernel != "" {
			k, kernel = cutSlot(kernel)
		}
		if w != k && !f(slot, k, w) {
			return false
		}
	}
	return true
}

// assignSlots is the step after render that keeps endpoint slots stable:
// render numbers a frontend's endpoints 0…n-1 in State order, and here an
// endpoint keeps the slot the kernel has for it (reconcile.KeepSlots), so
// replacing one endpoint rewrites one element instead of shifting every
// slot after it. A map holds one endpoint count only, so when the count
// changes every slot is new anyway. It returns p.
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
	have, ok := s.mapElems.Kernel(s.elemKeyOf(el.set, el.key, true))
	if !ok || have == el.value {
		return // a restart, or a change elsewhere: nothing moves
	}
	kernel := splitSlots(have)
	held := func(slot int) (string, bool) { return kernel[slot], kernel[slot] != "" }
	if out := reconcile.KeepSlots(splitSlots(el.value), len(kernel), held); out != nil {
		el.value = joinSlots(out)
	}
}
