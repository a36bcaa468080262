package nftables

import "slices"

// elemEntry is one element, or one frontend's endpoint slots (a slot
// group, slots.go): 150k at 10k × 10, two thirds of them set elements
// (hairpin, cluster IPs) without a value. It is 32 bytes, a size class
// (TestElemEntrySizeClass): a claim without a value is only counted (all
// of them want the same, so who claims does not matter), and what a map
// element holds beyond that (its values, its owned claims) is in vals.
type elemEntry struct {
	key  string
	vals *elemValues // nil: no value claimed or in the kernel
	set  uint32      // store.setNames index
	bits entryBits   // flags, and the count of claims without a value
}

// elemValues is what an element with a value holds: the kernel's value,
// and the claims that have one. The first claim is here; the few after
// it (a cluster IP's frontends of several ports, contested frontends)
// live in store.more.
type elemValues struct {
	kernel string
	first  elemClaim // owner nil: none
}

// elemClaim is one owner's claim on an element with a value. The owner
// is its part's copy, shared by all the part's claims: 8 bytes per claim
// instead of a 64-byte name.
type elemClaim struct {
	owner *owner
	value string
}

// entryBits are an entry's flags, and above them the count of its claims
// without a value.
type entryBits uint32

const (
	entryDirty   entryBits = 1 << iota // in store.dirtyElems
	entryPresent                       // in the kernel
	entryShared                        // claims beyond vals.first, in store.more
	entrySlots                         // a frontend's endpoint slots (slots.go)
	countShift   = iota
)

func (e *elemEntry) dirty() bool   { return e.bits&entryDirty != 0 }
func (e *elemEntry) present() bool { return e.bits&entryPresent != 0 }
func (e *elemEntry) shared() bool  { return e.bits&entryShared != 0 }
func (e *elemEntry) slots() bool   { return e.bits&entrySlots != 0 }

// flag turns the flags b on or off.
func (e *elemEntry) flag(b entryBits, on bool) {
	if on {
		e.bits |= b
	} else {
		e.bits &^= b
	}
}

// counted is the number of claims without a value.
func (e *elemEntry) counted() uint32 { return uint32(e.bits >> countShift) }

// kernel is the value in the kernel ("" for a set element, or none).
func (e *elemEntry) kernel() string {
	if e.vals == nil || !e.present() {
		return ""
	}
	return e.vals.kernel
}

// setKernel records the element in the kernel with value v.
func (e *elemEntry) setKernel(v string) {
	e.flag(entryPresent, true)
	if e.vals != nil {
		e.vals.kernel = v
	} else if v != "" {
		e.vals = &elemValues{kernel: v}
	}
}

// first is the first claim with a value (owner nil: none).
func (e *elemEntry) first() elemClaim {
	if e.vals == nil {
		return elemClaim{}
	}
	return e.vals.first
}

// clearClaims forgets every claim of e (store.more's too: the caller's).
func (e *elemEntry) clearClaims() {
	if e.vals != nil {
		e.vals.first = elemClaim{}
	}
	e.bits &= 1<<countShift - 1
	e.flag(entryShared, false)
}

// desiredValue is the value of the element's first claimant in name
// order, so that conflicting claims resolve the same way in every sync;
// "" for claims without a value.
func (s *store) desiredValue(e *elemEntry) (string, bool) {
	best := e.first()
	if best.owner == nil {
		return "", e.counted() > 0
	}
	for _, c := range s.others(e) {
		if c.owner.Compare(*best.owner) < 0 {
			best = c
		}
	}
	return best.value, true
}

// addClaim adds c to e unless it has a value and its owner has a claim
// already, and reports whether it did. A claim without a value is
// counted, each time (release drops it as often).
func (s *store) addClaim(e *elemEntry, c elemClaim) bool {
	if c.value == "" {
		e.bits += 1 << countShift
		return true
	}
	if e.vals == nil {
		e.vals = &elemValues{}
	}
	switch {
	case e.vals.first.owner == nil:
		e.vals.first = c
	case e.vals.first.owner == c.owner || slices.ContainsFunc(s.others(e), func(m elemClaim) bool { return m.owner == c.owner }):
		return false
	default:
		s.setOthers(e, append(s.others(e), c))
	}
	return true
}

// dropClaim removes one of o's claims on e: the one with a value, if o
// has one, else one counted.
func (s *store) dropClaim(e *elemEntry, o *owner) {
	mine := func(c elemClaim) bool { return c.owner == o }
	switch more := s.others(e); {
	case e.first().owner == o:
		e.vals.first = elemClaim{}
		if len(more) > 0 {
			e.vals.first = more[0]
			s.setOthers(e, more[1:])
		}
	case slices.ContainsFunc(more, mine):
		s.setOthers(e, slices.DeleteFunc(more, mine))
	case e.counted() > 0:
		e.bits -= 1 << countShift
	}
}

// others returns e's claims with a value after the first.
func (s *store) others(e *elemEntry) []elemClaim {
	if !e.shared() {
		return nil
	}
	return s.more[e]
}

func (s *store) setOthers(e *elemEntry, cs []elemClaim) {
	e.flag(entryShared, len(cs) > 0)
	if len(cs) > 0 {
		s.more[e] = cs
	} else {
		delete(s.more, e)
	}
}
