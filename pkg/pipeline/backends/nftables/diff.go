package nftables

import (
	"slices"
	"strings"
	"time"

	"sigs.k8s.io/knftables"

	"github.com/svcproxy/svcproxy/pkg/knft"
)

// Phases order the units of one sync so that every prefix of the sequence
// (a cold start is split into several transactions) leaves the kernel
// consistent: containers before contents, targets before what points at
// them, and removals in the opposite order. Rules of a chain that already
// has rules (frontends may point at it) are rewritten only once the chains
// and endpoint elements they may lead to are complete, i.e. after the
// endpoint elements; rules of a new chain go before, as nothing points at
// it until its frontends are added.
const (
	phaseTable = iota
	phaseSetAdd
	phaseChainAdd
	phaseChainRules
	// Deletes of an interval set's elements, before any add: the kernel
	// refuses an element that overlaps one still there ("File exists"),
	// e.g. a source range widened from /16 to /8.
	phaseRangeDel
	phaseElemTargets // element adds of rank 0
	phaseChainRewrite
	phaseElemGuards // rank 1
	// The firewall check's rules, when they change (an upgrade that
	// renamed its guard set, a repair), are rewritten once the guards they
	// read are complete: a guarded frontend is never unguarded in between.
	phaseGuardRewrite
	// Objects the kernel has of another kind or type than render's, with
	// every rule that names them (replace.go): once all they may lead to
	// is complete, before the frontends that may point at them.
	phaseReplace
	phaseElemFrontends // rank 2
	phaseElemDel       // + (2 - rank)
	// Chains that go are all flushed before any is deleted: a chain that
	// goes may jump to another that goes too (an eTP=Local entry chain to
	// its cluster-N chain), and the kernel refuses to delete a chain that
	// a rule still references, whatever order the names sort in. Sets and
	// maps that go are deleted between the two: once the chains are
	// flushed no rule reads them, and a verdict map's elements may still
	// name a chain that goes (upstream's firewall-ips, taken over), which
	// the kernel would refuse to delete while they do.
	phaseChainFlush = phaseElemDel + 3
	phaseSetDelete  = phaseChainFlush + 1
	phaseChainDel   = phaseSetDelete + 1
	// The layout marker names the layout once the rest is there
	// (marker.go).
	phaseMarker = phaseChainDel + 1
)

// elemAddPhase is the phase of an element add of rank (elemRank).
func elemAddPhase(rank int) int {
	return [...]int{phaseElemTargets, phaseElemGuards, phaseElemFrontends}[rank]
}

// unit is a group of operations that must be in the same transaction (a
// chain's flush and its new rules; an element's delete and re-add), plus
// how the kernel side of the store changes once it is committed.
type unit struct {
	phase  int
	sortBy string
	ops    []func(tx *knftables.Transaction)
	commit func()
	// run is set instead of ops and commit for a run of element changes
	// of one set and phase (diff_elem.go).
	run     *elemRun
	isMap   bool   // run's set is a map
	elemOps int    // operations of run: 1 per delete or add, 2 per replace
	s       *store // for run
}

// elemRunOps bounds the operations of a run of element changes (a slot
// group's are never split): a transaction packs whole units, so runs must
// stay well under defaultMaxOps.
const elemRunOps = 1024

// numOps is the number of operations the unit adds to a transaction.
func (u *unit) numOps() int {
	if u.run != nil {
		return u.elemOps
	}
	return len(u.ops)
}

// kernelUnit is u for knft: its operations, and the store's update once
// the kernel has them.
func (u *unit) kernelUnit() *knft.Unit {
	if u.run != nil {
		return u.elemUnit()
	}
	return &knft.Unit{Ops: len(u.ops), Done: u.commit, Objects: func(tx *knftables.Transaction) {
		for _, op := range u.ops {
			op(tx)
		}
	}}
}

// diff turns the dirty entries into units, in phase order.
func (s *store) diff() []*unit {
	var units []*unit
	s.recreated = map[string]bool{}
	// The objects to replace first (their elements and rules go in one
	// unit), then sets, then chains (which decide what endpoint maps are
	// re-created), then elements.
	s.replacing = s.planReplace()
	if s.replacing != nil {
		units = append(units, s.replaceUnit(s.replacing))
	}
	var markers []string
	for name := range s.dirtySets {
		units = append(units, s.diffSet(name)...)
	}
	for name := range s.dirtyChains {
		if isMarker(name) {
			markers = append(markers, name)
			continue
		}
		units = append(units, s.diffChain(name)...)
	}
	if u := s.diffMarkers(markers); u != nil {
		units = append(units, u)
	}
	if !s.tablePresent {
		units = append(units, &unit{phase: phaseTable,
			ops:    []func(*knftables.Transaction){func(tx *knftables.Transaction) { tx.Add(&knftables.Table{Comment: knftables.PtrTo(tableComment)}) }},
			commit: func() { s.tablePresent = true }})
	}
	// (phase, sortBy) is unique among object units.
	slices.SortFunc(units, func(a, b *unit) int {
		if a.phase != b.phase {
			return a.phase - b.phase
		}
		return strings.Compare(a.sortBy, b.sortBy)
	})
	return mergeByPhase(units, s.diffElems())
}

// mergeByPhase merges two unit lists sorted by phase, a's units first
// within a phase.
func mergeByPhase(a, b []*unit) []*unit {
	out := make([]*unit, 0, len(a)+len(b))
	for len(a) > 0 && len(b) > 0 {
		if b[0].phase < a[0].phase {
			out, b = append(out, b[0]), b[1:]
		} else {
			out, a = append(out, a[0]), a[1:]
		}
	}
	return append(append(out, a...), b...)
}

func (s *store) diffSet(name string) []*unit {
	e := s.sets[name]
	switch {
	case e.desired != nil && e.desired.bound:
		return nil // added with its chain's rules (diffChain)
	case e.desired != nil && !e.present:
		d := e.desired
		return []*unit{{phase: phaseSetAdd, sortBy: name,
			ops:    []func(*knftables.Transaction){func(tx *knftables.Transaction) { tx.Add(setObject(d)) }},
			commit: func() { e.added(d, d.size) }}}
	case e.desired == nil && e.present:
		return []*unit{{phase: phaseSetDelete, sortBy: name,
			ops: []func(*knftables.Transaction){deleteSetOp(name, e.isMap)},
			commit: func() {
				delete(s.sets, name)
				s.dropKernelSet(name) // deleting a set deletes its elements
			}}}
	case e.desired == nil:
		delete(s.sets, name)
	}
	return nil
}

func setObject(d *setSpec) knftables.Object {
	var timeout *time.Duration
	if d.timeout > 0 {
		timeout = knftables.PtrTo(d.timeout)
	}
	var size *uint64
	if d.size > 0 {
		size = knftables.PtrTo(d.size)
	}
	if d.isMap {
		return &knftables.Map{Name: d.name, Type: d.typ, TypeOf: d.typeOf, Flags: d.flags, Timeout: timeout, Size: size}
	}
	return &knftables.Set{Name: d.name, Type: d.typ, TypeOf: d.typeOf, Flags: d.flags, Timeout: timeout, Size: size}
}

func (s *store) diffChain(name string) []*unit {
	e := s.chains[name]
	if e.desired == nil {
		if !e.present {
			delete(s.chains, name)
			return nil
		}
		return []*unit{
			{phase: phaseChainFlush, sortBy: name,
				ops:    []func(*knftables.Transaction){func(tx *knftables.Transaction) { tx.Flush(&knftables.Chain{Name: name}) }},
				commit: func() { e.kernel = nil }},
			{phase: phaseChainDel, sortBy: name,
				ops:    append([]func(*knftables.Transaction){func(tx *knftables.Transaction) { tx.Delete(&knftables.Chain{Name: name}) }}, dropCounter(name)...),
				commit: func() { delete(s.chains, name) }},
		}
	}
	d := e.desired
	r := s.replacing
	if r.replaces(name) {
		return nil // deleted and added again, rules and all (replace.go)
	}
	var units []*unit
	if !e.present {
		units = append(units, &unit{phase: phaseChainAdd, sortBy: name,
			ops:    []func(*knftables.Transaction){func(tx *knftables.Transaction) { tx.Add(chainObject(d)) }},
			commit: func() { e.present, e.kernel, e.hook = true, nil, d.kernelHook() }})
	}
	if r.rewrites(name) {
		return units // its rules are written with what they name
	}
	ids := d.ruleIDs()
	var m *setEntry
	if d.epMap != nil {
		m = s.sets[d.epMap.name]
	}
	grow := m != nil && s.epMapOutgrown(d.epMap.name, m)
	// An endpoint map of another type is re-created with its chain, as
	// when it grows.
	retype := m != nil && typeDiffers(d.epMap, m)
	if slices.Equal(ids, e.kernel) && (m == nil || m.present) && !grow && !retype {
		return units
	}
	phase := phaseChainRules
	if e.present && len(e.kernel) > 0 {
		phase = rewritePhase(name)
	}
	u := &unit{phase: phase, sortBy: name, commit: func() { e.rulesWritten(d, ids) }}
	if e.present && len(e.kernel) > 0 {
		u.ops = append(u.ops, func(tx *knftables.Transaction) { tx.Flush(&knftables.Chain{Name: name}) })
	}
	var elemOps []func(*knftables.Transaction)
	if m != nil {
		// Frontends may already point at a chain that has rules: its map
		// must be complete when the new rule is, so its elements go in
		// this unit too (an upgrade from shared endpoint maps, a repair).
		live := e.present && len(e.kernel) > 0
		spec := *d.epMap
		spec.size = s.epMapSize(spec.name, m, grow)
		elemOps = s.bindEndpointMap(u, &spec, m, live)
	}
	u.ops = append(append(u.ops, ruleOps(d, ids)...), elemOps...)
	return append(units, u)
}

// ruleOps adds d's rules (ids: their comments), and the named counter one
// of them uses: "add" keeps an existing counter's value, so a rewritten
// chain counts on.
func ruleOps(d *chainSpec, ids []string) []func(*knftables.Transaction) {
	var ops []func(*knftables.Transaction)
	if c := chainCounter(d.name); c != "" {
		ops = append(ops, func(tx *knftables.Transaction) { tx.Add(&knftables.Counter{Name: c}) })
	}
	for i, r := range d.rules {
		rule := &knftables.Rule{Chain: d.name, Rule: r, Comment: knftables.PtrTo(ids[i])}
		ops = append(ops, func(tx *knftables.Transaction) { tx.Add(rule) })
	}
	return ops
}

// rulesWritten records that the kernel's chain has d's rules (ids).
func (e *chainEntry) rulesWritten(d *chainSpec, ids []string) {
	e.kernel, e.written, e.refs = ids, d, nil
}

// rewritePhase is when the rules of chain, which has rules, are rewritten.
func rewritePhase(chain string) int {
	if chain == chainFirewallCheck {
		return phaseGuardRewrite
	}
	return phaseChainRewrite
}

// bindEndpointMap puts the endpoint map of a dispatch chain whose rules are
// (re)written into the same unit: nft cannot add a rule that reads an
// existing numgen map, only one created in the same transaction. A map
// already in the kernel (a damaged chain, a rule whose text changed, a
// chain deleted by hand) is therefore deleted and added again — the chain
// was flushed first, so nothing references it — and then, as when fill is
// set, every element it should hold is added in the unit; the returned
// element ops go after the rules.
func (s *store) bindEndpointMap(u *unit, spec *setSpec, m *setEntry, fill bool) []func(*knftables.Transaction) {
	name := spec.name
	if m.present {
		u.ops = append(u.ops, deleteSetOp(name, m.isMap))
	}
	u.ops = append(u.ops, func(tx *knftables.Transaction) { tx.Add(setObject(spec)) })
	commitRules := u.commit
	if !m.present && !fill {
		u.commit = func() { commitRules(); m.added(spec, spec.size) }
		return nil
	}
	ops, commitElems := s.refill(name, true)
	u.commit = func() {
		commitRules()
		m.added(spec, spec.size)
		commitElems()
	}
	return ops
}

// refill returns the operations that add every element set should hold,
// for a set (re-)created in the same unit, and the update of the kernel
// side once they are committed. The set's other element changes are left
// to that unit (recreated).
func (s *store) refill(set string, isMap bool) ([]func(*knftables.Transaction), func()) {
	s.recreated[set] = true
	// In key order: the same State sends the same transaction.
	var kept []elemState
	for st := range s.groupStates(set) {
		if st.wanted {
			kept = append(kept, st)
		}
	}
	slices.SortFunc(kept, func(a, b elemState) int { return compareElemKeys(a.key, b.key) })
	var ops []func(*knftables.Transaction)
	layout := unitLayout(set, s.desiredSet(set), "")
	add := func(key, value string) {
		el := elementObject(set, isMap, key, value)
		ops = append(ops, func(tx *knftables.Transaction) { tx.Add(el) })
	}
	for _, st := range kept {
		if !st.key.slots {
			add(spellKey(set, st.key.key), st.want)
			continue
		}
		eachSlot(st.want, func(slot int, value string) { add(spellSlot(layout, st.key.key, slot, value)) })
	}
	return ops, func() {
		s.dropKernelSet(set)
		for _, st := range kept {
			s.setKernel(st.key, st.want)
		}
	}
}

// compareElemKeys orders element keys by their data (a slot group after
// an element of the same data).
func compareElemKeys(a, b elemKey) int {
	if c := strings.Compare(a.key, b.key); c != 0 {
		return c
	}
	switch {
	case a.slots == b.slots:
		return int(a.set) - int(b.set)
	case b.slots:
		return -1
	}
	return 1
}

// desiredSet is render's declaration of set, nil if it wants none.
func (s *store) desiredSet(set string) *setSpec {
	if e := s.sets[set]; e != nil {
		return e.desired
	}
	return nil
}

// elementObject is the element key (: value) of set, nft-spelled.
func elementObject(set string, isMap bool, key, value string) *knftables.Element {
	if !isMap {
		return &knftables.Element{Set: set, Key: splitElem(key)}
	}
	el := &knftables.Element{Map: set, Key: splitElem(key)}
	if value != "" {
		el.Value = splitElem(value)
	}
	return el
}

// deleteSetOp deletes the kernel's set or map name.
func deleteSetOp(name string, isMap bool) func(*knftables.Transaction) {
	return func(tx *knftables.Transaction) {
		if isMap {
			tx.Delete(&knftables.Map{Name: name})
		} else {
			tx.Delete(&knftables.Set{Name: name})
		}
	}
}

// Endpoint maps are created with a size: the kernel then gives them a
// hash table of a fixed number of buckets instead of one that grows by
// rehashing as elements come in, which made up a third of the kernel's
// time to insert the elements of a cold sync. The size is also a limit
// (adds beyond it fail), so it is twice what the map may hold during this
// sync, and when a map outgrows it, it is re-created with its chain
// (bindEndpointMap) at twice that again. A map without a size (made
// before sizes were set, or read through knftables, which does not tell)
// has no limit: it is not re-created for a size, but gets one when it is
// re-created anyway.
const minEPMapSize = 64

// epMapOutgrown reports whether the kernel object m of endpoint map name
// must be re-created because it is too small. The store holds an entry for
// every element the map has or will have, so their count bounds what it
// holds at any point of the sync (adds go before deletes). Counting them
// walks the map, so it is done only when a bound in O(1) does not settle
// it: an entry of a map of n endpoints stands for at most n elements
// (endpointMapSlots), and a map's size is at least twice what it held
// when it was made, so a partial sync almost never counts.
func (s *store) epMapOutgrown(name string, m *setEntry) bool {
	if !m.present || m.size == 0 {
		return false
	}
	if n, ok := endpointMapSlots(name); ok && uint64(s.groupBound(name))*uint64(n) <= m.size {
		return false
	}
	return s.elemCount(name) > m.size
}

// epMapSize returns the size endpoint map name is (re-)created with: its
// kernel object's (m), unless it outgrew it (grow) or has none, else twice
// what it will hold, a power of two.
func (s *store) epMapSize(name string, m *setEntry, grow bool) uint64 {
	if m.present && m.size != 0 && !grow {
		return m.size
	}
	n := s.elemCount(name)
	size := uint64(minEPMapSize)
	for size < 2*n {
		size *= 2
	}
	return size
}

// elemCount is the number of elements the entries of set stand for: a
// slot group's are its slots, the desired or the kernel's, whichever are
// more.
func (s *store) elemCount(set string) uint64 {
	n := uint64(0)
	for st := range s.groupStates(set) {
		switch {
		case !st.key.slots:
			n++
		case st.held && st.have != st.want:
			n += uint64(max(slotCount(st.want), slotCount(st.have)))
		default: // the usual case: one value to count
			n += uint64(slotCount(st.want))
		}
	}
	return n
}

func chainObject(d *chainSpec) *knftables.Chain {
	c := &knftables.Chain{Name: d.name}
	if d.base != nil {
		c.Type = knftables.PtrTo(d.base.typ)
		c.Hook = knftables.PtrTo(d.base.hook)
		c.Priority = knftables.PtrTo(d.base.prio)
	}
	return c
}

// dropCounter returns the operations that delete a going chain's named
// counter, after the chain (its rule references it). Add, then delete, as
// upstream: the delete succeeds whether or not the counter is there (one
// made by hand, or lost with a failed transaction).
func dropCounter(chain string) []func(*knftables.Transaction) {
	c := chainCounter(chain)
	if c == "" {
		return nil
	}
	return []func(*knftables.Transaction){func(tx *knftables.Transaction) {
		tx.Add(&knftables.Counter{Name: c})
		tx.Delete(&knftables.Counter{Name: c})
	}}
}
