package nftables

import (
	"slices"
	"time"

	"sigs.k8s.io/knftables"

	"github.com/svcproxy/svcproxy/pkg/knft"
)

// chainSpec is one chain as render wants it: its rules in order.
type chainSpec struct {
	name  string
	base  *baseChain // nil for a regular chain
	rules []string
	// jump is "goto <name>" for a dispatch chain: made with the spec,
	// once per chain and sync, so every frontend's verdict shares it.
	jump string
	// epMap is the endpoint map this dispatch chain's DNAT rule reads, or
	// nil. nft 1.0.6 cannot add a rule that references an existing
	// "typeof … numgen" map (it rebuilds the key type from the kernel's
	// udata and fails with "conflicting protocols specified"), so the map
	// belongs to this chain alone and is created (or re-created) in the
	// same transaction as the rule; see diffChain.
	epMap *setSpec
}

// baseChain is where a base chain hooks in.
type baseChain struct {
	typ  knftables.BaseChainType
	hook knftables.BaseChainHook
	prio knftables.BaseChainPriority
}

// kernelHook is b as the kernel reports it: the priority as a number.
// Named priorities have the same values in the ip and ip6 families.
func (b *baseChain) kernelHook() *knft.ChainHook {
	prio, err := knftables.ParsePriority(knftables.IPv4Family, string(b.prio))
	if err != nil {
		panic(err) // not reached: render names only priorities nft knows
	}
	return &knft.ChainHook{Type: string(b.typ), Hook: string(b.hook), Priority: prio}
}

// hookDiffers reports whether the kernel's chain of e is attached
// elsewhere than d wants: another hook, type or priority (the previous
// layout's filter chains ran at dstnat-10, upstream's at filter), or a
// base chain where d is a regular one or the other way round. The kernel
// can do neither in place, so such a chain is deleted and added again
// (replace.go). A chain whose hook the read-back did not report is taken
// as right.
func hookDiffers(d *chainSpec, e *chainEntry) bool {
	return e.present && e.hook != nil && *d.kernelHook() != *e.hook
}

// kernelHook is where the kernel has c once added: the zero ChainHook for
// a regular chain.
func (c *chainSpec) kernelHook() *knft.ChainHook {
	if c.base == nil {
		return &knft.ChainHook{}
	}
	return c.base.kernelHook()
}

// refs are the names c's rules use (knft.RuleRefs), each once.
func (c *chainSpec) refs() []string {
	var refs []string
	for _, r := range c.rules {
		for _, name := range knft.RuleRefs(r) {
			if !slices.Contains(refs, name) {
				refs = append(refs, name)
			}
		}
	}
	return refs
}

// ruleIDs returns the comment of each rule, which is what read-back can see.
func (c *chainSpec) ruleIDs() []string {
	ids := make([]string, len(c.rules))
	for i, r := range c.rules {
		ids[i] = ruleID(r)
	}
	return ids
}

// setSpec is one set or map definition (not its elements).
type setSpec struct {
	name    string
	isMap   bool
	typ     string // "type" form
	typeOf  string // "typeof" form, when typ is empty
	flags   []knftables.SetFlag
	timeout time.Duration
	// bound marks an endpoint map that is added with its chain's rules,
	// never on its own.
	bound bool
	// size is the most elements the set may hold (0: no limit); the store
	// sets it for endpoint maps (epMapSize).
	size uint64
}

// kernelType is the type the kernel reports for d once added, or nil if
// its declaration holds a type knft does not know.
func (d *setSpec) kernelType() *knft.SetType {
	var timeout *time.Duration
	if d.timeout > 0 {
		timeout = &d.timeout
	}
	t, ok := knft.DeclaredType(d.typ, d.typeOf, d.flags, d.isMap, timeout)
	if !ok {
		return nil
	}
	return &t
}

// typeDiffers reports whether the kernel's object e of d's name is another
// kind (a set where d is a map, or the other way round) or of another type
// (key, value, flags or its elements' timeout: a changed session affinity
// timeout). The kernel cannot change it in place: it is
// deleted and added again with every rule that names it (replace.go; an
// endpoint map with its chain, bindEndpointMap). A type the read-back did
// not report is taken as right.
func typeDiffers(d *setSpec, e *setEntry) bool {
	if !e.present {
		return false
	}
	if e.isMap != d.isMap {
		return true
	}
	want := d.kernelType()
	return e.typ != nil && want != nil && *want != *e.typ
}

// elemSpec is one set or map element, or one frontend's endpoint slots
// (slots: key is the frontend, value the slots' values, slots.go); keys
// and values are data (datakeys.go), a verdict spelled ("goto x").
type elemSpec struct {
	set   string
	key   string
	value string // empty for set elements
	slots bool
}

// part is everything one owner needs in the kernel: the global layout, or
// one service port. Several owners may need the same chain (shared
// dispatch chains) or element (a cluster IP with several ports).
type part struct {
	// owner is the service port's name in the State it was rendered from
	// (no copy per part) until it is claimed: then the store's copy, the
	// same for every part of the owner (store.replace).
	owner  *owner
	chains []*chainSpec
	sets   []*setSpec
	elems  []elemSpec // as rendered; dropped once claimed
}

// addChain adds c and, for a dispatch chain, its endpoint map: the two are
// claimed and released together.
func (p *part) addChain(c *chainSpec) {
	p.chains = append(p.chains, c)
	if c.epMap != nil {
		p.sets = append(p.sets, c.epMap)
	}
}

func (p *part) addSet(s *setSpec) { p.sets = append(p.sets, s) }

func (p *part) addElem(set, key, value string) {
	p.elems = append(p.elems, elemSpec{set: set, key: key, value: value})
}

// elemRank orders element changes so that every intermediate state is
// consistent: things a frontend points at (rank 0) are added before the
// guards that filter it (rank 1), which are added before the frontend
// itself (rank 2); deletions go the other way round.
func elemRank(set string) int {
	switch set {
	case mapServiceIPs, mapServiceNodePorts:
		return 2
	case setFirewallGuards:
		return 1
	default:
		return 0
	}
}
