package nftables

import (
	"slices"

	"github.com/svcproxy/svcproxy/pkg/knft"
	"github.com/svcproxy/svcproxy/pkg/proxy"
)

// owner is who needs an object: a service port, or the zero value for the
// global layout.
type owner = proxy.ServicePortName

// store remembers, for every object, who needs it (the desired side) and
// what this Proxier last committed to the kernel (the kernel side). Sync
// changes the desired side, diffs only the entries it touched, and updates
// the kernel side as each transaction succeeds.
type store struct {
	tablePresent bool
	chains       map[string]*chainEntry
	sets         map[string]*setEntry
	elems        map[string]*entryIndex // by set
	// setIDs and setNames number the sets elements belong to
	// (elemEntry.set): 4 bytes per entry instead of a name.
	setIDs   map[string]uint32
	setNames []string
	// more holds the claims after the first of the few elements that
	// have several (elemEntry.shared): a cluster IP's ports, an endpoint
	// in several services' hairpin sets.
	more map[*elemEntry][]elemClaim

	// parts holds what each owner claimed, so it can be released.
	parts *partIndex

	dirtyChains map[string]struct{}
	dirtySets   map[string]struct{}
	// dirtyElems lists each touched element once (elemEntry.dirty): a
	// slice, because a cold sync touches every element and a map keyed by
	// set and key cost two string hashes per element and claim.
	dirtyElems []*elemEntry

	// recreated holds the sets the current diff adds (or deletes and
	// adds) with every element in one unit (an endpoint map with its
	// chain's rules, a replaced set); diffElem leaves their elements to
	// that unit.
	recreated map[string]bool
	// replacing is what the current diff replaces (replace.go), or nil.
	replacing *replacement
}

type chainEntry struct {
	desired *chainSpec
	claims  int
	present bool
	kernel  []string // rule IDs in the kernel
	// refs are the names the kernel's rules use (knft.RuleRefs), as read
	// back; written is the spec whose rules this process wrote since,
	// whose refs those are then (kernelRefs). A chain's rules are
	// rewritten when a name they use is replaced (replace.go).
	refs    []string
	written *chainSpec
	// hook is where the kernel's chain is attached (the zero ChainHook:
	// a regular chain); nil when the read-back did not say.
	hook *knft.ChainHook
}

// kernelRefs are the names the kernel's rules of e use.
func (e *chainEntry) kernelRefs() []string {
	if e.written != nil {
		return e.written.refs()
	}
	return e.refs
}

type setEntry struct {
	desired *setSpec
	claims  int
	present bool
	isMap   bool   // of the kernel object, when present
	size    uint64 // of the kernel object, when present; 0: no limit
	// typ is the kernel object's type, when present and the read-back
	// said.
	typ *knft.SetType
}

// added records that the kernel has d now, of size.
func (e *setEntry) added(d *setSpec, size uint64) {
	e.present, e.isMap, e.size, e.typ = true, d.isMap, size, d.kernelType()
}

func newStore() *store {
	s := &store{
		chains: map[string]*chainEntry{},
		sets:   map[string]*setEntry{},
		elems:  map[string]*entryIndex{},
		setIDs: map[string]uint32{},
		more:   map[*elemEntry][]elemClaim{},
		parts:  &partIndex{},
	}
	s.clearDirty()
	return s
}

func (s *store) clearDirty() {
	s.dirtyChains = map[string]struct{}{}
	s.dirtySets = map[string]struct{}{}
	for _, e := range s.dirtyElems {
		e.flag(entryDirty, false)
	}
	s.dirtyElems = nil
}

// resetClaims forgets every claim (before a full sync re-claims everything)
// and marks every entry dirty.
func (s *store) resetClaims() {
	s.parts = &partIndex{}
	for name, e := range s.chains {
		e.desired, e.claims = nil, 0
		s.dirtyChains[name] = struct{}{}
	}
	for name, e := range s.sets {
		e.desired, e.claims = nil, 0
		s.dirtySets[name] = struct{}{}
	}
	s.more = map[*elemEntry][]elemClaim{}
	n := 0
	for _, m := range s.elems {
		n += m.len()
	}
	s.dirtyElems = slices.Grow(s.dirtyElems, n)
	for _, m := range s.elems {
		for e := range m.all {
			e.clearClaims()
			s.markDirty(e)
		}
	}
}

// replace swaps o's claims for p's (either may be nil).
func (s *store) replace(o owner, p *part) {
	if old := s.parts.get(o); old != nil {
		s.release(old)
		s.parts.remove(o)
	}
	if p != nil {
		s.claim(o, p)
		s.parts.add(p)
	}
}

func (s *store) claim(o owner, p *part) {
	for _, c := range p.chains {
		e := s.chains[c.name]
		if e == nil {
			e = &chainEntry{}
			s.chains[c.name] = e
		}
		e.desired = c
		e.claims++
		s.dirtyChains[c.name] = struct{}{}
	}
	for _, st := range p.sets {
		e := s.sets[st.name]
		if e == nil {
			e = &setEntry{}
			s.sets[st.name] = e
		}
		e.desired = st
		e.claims++
		s.dirtySets[st.name] = struct{}{}
	}
	if p.owner == nil || *p.owner != o {
		p.owner = new(owner)
		*p.owner = o
	}
	id := p.owner
	p.entries = make([]*elemEntry, 0, len(p.elems))
	var set string
	var setID uint32
	var m *entryIndex
	for _, el := range p.elems {
		// A part's elements come in runs of one set.
		if m == nil || el.set != set {
			set, m, setID = el.set, s.setElems(el.set), s.setID(el.set)
		}
		// Render found the entry already (a slot group the kernel
		// holds): no second lookup.
		e := el.entry
		if e == nil {
			if e = m.get(el.key); e == nil {
				e = &elemEntry{set: setID, key: el.key}
				e.flag(entrySlots, el.slots)
				m.add(e)
			}
		}
		if s.addClaim(e, elemClaim{owner: id, value: el.value}) {
			p.entries = append(p.entries, e)
		}
		if e.present() && e.kernel() == el.value && el.value != "" {
			e.vals.kernel = el.value // one string for both: a copy read back can go
		}
		s.markDirty(e)
	}
	// The entries are what release needs; the specs would keep 48 bytes
	// per element alive for as long as the part.
	p.elems = nil
}

func (s *store) release(p *part) {
	for _, c := range p.chains {
		if e := s.chains[c.name]; e != nil {
			if e.claims--; e.claims <= 0 {
				e.desired, e.claims = nil, 0
			}
			s.dirtyChains[c.name] = struct{}{}
		}
	}
	for _, st := range p.sets {
		if e := s.sets[st.name]; e != nil {
			if e.claims--; e.claims <= 0 {
				e.desired, e.claims = nil, 0
			}
			s.dirtySets[st.name] = struct{}{}
		}
	}
	// A claimed entry stays in s.elems (only unclaimed ones are removed),
	// so the part's pointers are the live entries.
	for _, e := range p.entries {
		s.dropClaim(e, p.owner)
		s.markDirty(e)
	}
}

// reserveLike sizes every set's entry index, and the dirty list, for
// total parts, from what the first done of them claimed (fullClaims).
func (s *store) reserveLike(done, total int) {
	if done == 0 {
		return
	}
	scale := func(n int) int { return int(int64(n) * int64(total) / int64(done)) }
	for _, m := range s.elems {
		m.reserve(scale(m.len()))
	}
	s.dirtyElems = slices.Grow(s.dirtyElems, scale(len(s.dirtyElems))-len(s.dirtyElems))
}

// compactElems shrinks the entry indexes that are much bigger than their
// entries need.
func (s *store) compactElems() {
	for _, m := range s.elems {
		m.compact()
	}
}

// setID returns the number of a set's name, numbering it if new. Set
// names are few (hundreds) and kept for the life of the store.
func (s *store) setID(set string) uint32 {
	id, ok := s.setIDs[set]
	if !ok {
		id = uint32(len(s.setNames))
		s.setIDs[set] = id
		s.setNames = append(s.setNames, set)
	}
	return id
}

// setOf returns the name of e's set.
func (s *store) setOf(e *elemEntry) string { return s.setNames[e.set] }

// holdsElements reports whether any set has entries.
func (s *store) holdsElements() bool {
	for _, m := range s.elems {
		if m.len() > 0 {
			return true
		}
	}
	return false
}

// setElems returns the entries of set, creating the map if needed.
func (s *store) setElems(set string) *entryIndex {
	m := s.elems[set]
	if m == nil {
		m = &entryIndex{}
		s.elems[set] = m
	}
	return m
}

func (s *store) elem(set, key string, create bool) *elemEntry {
	if !create {
		return s.elems[set].get(key)
	}
	m := s.setElems(set)
	e := m.get(key)
	if e == nil {
		e = &elemEntry{set: s.setID(set), key: key}
		m.add(e)
	}
	return e
}

func (s *store) markDirty(e *elemEntry) {
	if !e.dirty() {
		e.flag(entryDirty, true)
		s.dirtyElems = append(s.dirtyElems, e)
	}
}

// hasElems reports whether the kernel may hold elements of set: its set
// exists there (at a cold start none does, and render skips the lookups).
func (s *store) hasElems(set string) bool {
	e := s.sets[set]
	return e != nil && e.present && s.elems[set].len() > 0
}

// kernelEntry is the entry of an element the kernel holds, or nil.
func (s *store) kernelEntry(set, key string) *elemEntry {
	e := s.elems[set].get(key)
	if e == nil || !e.present() {
		return nil
	}
	return e
}
