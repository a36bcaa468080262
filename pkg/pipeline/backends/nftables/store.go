package nftables

import (
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
	// setElems and mapElems are the elements of sets and of maps
	// (elems.go).
	setElems *setTable
	mapElems *mapTable
	// setItems and mapItems are the buffers claimElems makes items in.
	setItems []setItem
	mapItems []mapItem
	// setIDs and setNames number the sets elements belong to (elemKey.set):
	// 4 bytes per element instead of a name.
	setIDs   map[string]uint32
	setNames []string

	// parts holds what each owner claimed, so it can be released.
	parts *parts

	dirtyChains map[string]struct{}
	dirtySets   map[string]struct{}

	// recreated holds the sets the current diff adds (or deletes and
	// adds) with every element in one unit (an endpoint map with its
	// chain's rules, a replaced set); diffElems leaves their elements to
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
		chains:   map[string]*chainEntry{},
		sets:     map[string]*setEntry{},
		setElems: newSetTable(),
		mapElems: newMapTable(),
		setIDs:   map[string]uint32{},
		parts:    newParts(),
	}
	s.clearDirty()
	return s
}

func (s *store) clearDirty() {
	s.dirtyChains = map[string]struct{}{}
	s.dirtySets = map[string]struct{}{}
	s.setElems.ClearDirty()
	s.mapElems.ClearDirty()
}

// resetClaims forgets every claim (before a full sync re-claims everything)
// and marks every entry dirty.
func (s *store) resetClaims() {
	s.parts.clear()
	for name, e := range s.chains {
		e.desired, e.claims = nil, 0
		s.dirtyChains[name] = struct{}{}
	}
	for name, e := range s.sets {
		e.desired, e.claims = nil, 0
		s.dirtySets[name] = struct{}{}
	}
	s.setElems.ResetClaims()
	s.mapElems.ResetClaims()
}

// replace swaps o's claims for p's (either may be nil).
func (s *store) replace(o owner, p *part) {
	old := s.parts.get(o)
	if old != nil {
		s.release(old)
		s.parts.remove(o)
	}
	switch {
	case p == nil && old != nil:
		s.claimElems(ownerRef{old.owner}, nil)
		return
	case p == nil:
		return
	case old != nil:
		p.owner = old.owner // the element tables' name of o
	default:
		// A copy of its own: the tables know o by it for as long as o
		// claims, and render's points into the State's ServicePort,
		// which it would keep alive all that time.
		p.owner = new(owner)
		*p.owner = o
	}
	s.claim(p)
	s.parts.add(p)
}

func (s *store) claim(p *part) {
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
	s.claimElems(ownerRef{p.owner}, p.elems)
	// The tables keep what they need of the elements; the specs would
	// keep 48 bytes per element alive for as long as the part.
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

// setOf returns the name of k's set.
func (s *store) setOf(k elemKey) string { return s.setNames[k.set] }
