package nftables

import (
	"slices"
	"strings"

	"sigs.k8s.io/knftables"

	"github.com/svcproxy/svcproxy/pkg/pipeline/reconcile"
)

// replacement is what one sync replaces: the objects the kernel has under
// a name render uses, but of another kind or type (a set where render has
// a map, a map of another key type, a base chain at another hook or
// priority, a regular chain where render has a base chain: another layout
// wrote the table), and what must change with them. The kernel changes
// none of that in place, refuses to delete an object a rule or an element
// still uses, and nft refuses a rule that reads an object as what it is
// not; so in one unit, and so in one transaction:
//
//   - the chains whose rules name one of them (in the kernel, or as render
//     wants them) are flushed;
//   - the elements of verdict maps whose change names a chain the unit
//     deletes or rewrites are deleted;
//   - the objects are deleted and added as render wants them, each set
//     with every element it should hold;
//   - those chains get render's rules (a dispatch chain its endpoint map
//     again, bindEndpointMap), and the verdict elements their new value.
//
// The unit runs once everything those rules and elements lead to is
// complete and before the frontends that may point at them
// (phaseReplace): no transaction boundary of the sync sees a rule without
// what it reads, or a frontend pointing at a chain not yet written. An
// endpoint map of another type is not here: it is re-created with its
// chain, which alone reads it (diffChain).
type replacement struct {
	sets   []string  // sets and maps replaced
	chains []string  // chains replaced
	rules  []string  // other chains whose rules the unit rewrites
	elems  []elemKey // verdict map elements the unit changes

	setNames map[string]bool
	replaced map[string]bool // chains replaced
	touched  map[string]bool // chains replaced or rewritten
	inUnit   map[elemKey]bool
}

// replaces reports whether r replaces chain.
func (r *replacement) replaces(chain string) bool { return r != nil && r.replaced[chain] }

// rewrites reports whether r writes the rules of chain, which it does not
// replace.
func (r *replacement) rewrites(chain string) bool {
	return r != nil && r.touched[chain] && !r.replaced[chain]
}

// holds reports whether r changes element k.
func (r *replacement) holds(k elemKey) bool { return r != nil && r.inUnit[k] }

// names reports whether refs name an object r replaces.
func (r *replacement) names(refs []string) bool {
	return slices.ContainsFunc(refs, func(n string) bool { return r.setNames[n] || r.replaced[n] })
}

// planReplace finds what this diff replaces, or nil (every sync but the
// first over another layout's table).
func (s *store) planReplace() *replacement {
	r := &replacement{setNames: map[string]bool{}, replaced: map[string]bool{}, touched: map[string]bool{}}
	for name := range s.dirtySets {
		if e := s.sets[name]; e.desired != nil && !e.desired.bound && typeDiffers(e.desired, e) {
			r.sets = append(r.sets, name)
			r.setNames[name] = true
		}
	}
	for name := range s.dirtyChains {
		if e := s.chains[name]; e.desired != nil && hookDiffers(e.desired, e) {
			r.chains = append(r.chains, name)
			r.replaced[name], r.touched[name] = true, true
		}
	}
	if len(r.sets)+len(r.chains) == 0 {
		return nil
	}
	for name, e := range s.chains {
		if r.replaced[name] || isMarker(name) {
			continue
		}
		if (e.present && r.names(e.kernelRefs())) || (e.desired != nil && r.names(e.desired.refs())) {
			r.rules = append(r.rules, name)
			r.touched[name] = true
		}
	}
	r.elems = s.verdictsTouching(r)
	r.inUnit = make(map[elemKey]bool, len(r.elems))
	for _, e := range r.elems {
		r.inUnit[e] = true
	}
	slices.Sort(r.sets)
	slices.Sort(r.chains)
	slices.Sort(r.rules)
	return r
}

// verdictsTouching returns the elements of verdict maps (not replaced
// themselves) that must change in r's unit: those pointing at a chain it
// deletes, and those with a change whose old or new value is a chain whose
// rules it writes (a chain that is new, or flushed for good as no render
// wants it).
func (s *store) verdictsTouching(r *replacement) []elemKey {
	var out []elemKey
	for _, set := range slices.Sorted(func(yield func(string) bool) {
		for name, se := range s.sets {
			if se.present && se.isMap && !r.setNames[name] && !yield(name) {
				return
			}
		}
	}) {
		g, ok := s.groupOf(set)
		if !ok {
			continue
		}
		// In key order: the same table and State send the same unit.
		states := slices.SortedFunc(s.mapElems.GroupStates(g), func(a, b reconcile.KeyState[elemKey, string]) int {
			return compareElemKeys(a.Key, b.Key)
		})
		for _, st := range states {
			k, want, ok, have, present := st.Key, st.Want, st.Wanted, st.Have, st.Held
			if k.slots {
				continue
			}
			var had string
			if present {
				had = verdictTarget(have)
			}
			change := !present || !ok || have != want
			if r.replaced[had] || (change && (r.touched[had] || (ok && r.touched[verdictTarget(want)]))) {
				out = append(out, k)
			}
		}
	}
	return out
}

// verdictTarget is the chain a verdict jumps or goes to, or "".
func verdictTarget(v string) string {
	for _, p := range []string{"goto ", "jump "} {
		if name, ok := strings.CutPrefix(v, p); ok {
			return name
		}
	}
	return ""
}

// replaceUnit is r's unit, in the order the kernel needs: what uses the
// old objects goes, the objects are replaced and filled, and what uses
// them comes back.
func (s *store) replaceUnit(r *replacement) *unit {
	u := &unit{phase: phaseReplace, sortBy: "replace"}
	var commits []func()
	for _, name := range r.rules {
		if e := s.chains[name]; e.present && len(e.kernel) > 0 {
			u.ops = append(u.ops, func(tx *knftables.Transaction) { tx.Flush(&knftables.Chain{Name: name}) })
		}
	}
	u.ops = append(u.ops, s.verdictOps(r, true)...)
	for _, name := range r.chains {
		u.ops = append(u.ops, func(tx *knftables.Transaction) { tx.Delete(&knftables.Chain{Name: name}) })
	}
	for _, name := range r.sets {
		u.ops = append(u.ops, deleteSetOp(name, s.sets[name].isMap))
	}
	var fill []func(*knftables.Transaction)
	for _, name := range r.sets {
		e := s.sets[name]
		d := e.desired
		u.ops = append(u.ops, func(tx *knftables.Transaction) { tx.Add(setObject(d)) })
		ops, commit := s.refill(name, d.isMap)
		fill = append(fill, ops...)
		commits = append(commits, func() { e.added(d, d.size); commit() })
	}
	for _, name := range r.chains {
		d := s.chains[name].desired
		u.ops = append(u.ops, func(tx *knftables.Transaction) { tx.Add(chainObject(d)) })
	}
	u.ops = append(u.ops, fill...)
	for _, name := range slices.Concat(r.chains, r.rules) {
		ops, commit := s.rewriteOps(name)
		u.ops = append(u.ops, ops...)
		commits = append(commits, commit)
	}
	u.ops = append(u.ops, s.verdictOps(r, false)...)
	u.commit = func() {
		for _, c := range commits {
			c()
		}
		for _, k := range r.elems {
			s.commitVerdict(k)
		}
	}
	return u
}

// rewriteOps writes the rules render wants in chain, which the unit
// flushed or added (none if render wants no such chain: it is left empty
// and deleted with the stale chains), and the update of its kernel side.
func (s *store) rewriteOps(name string) ([]func(*knftables.Transaction), func()) {
	e := s.chains[name]
	d := e.desired
	if d == nil {
		return nil, func() { e.kernel, e.refs, e.written = nil, nil, nil }
	}
	ids := d.ruleIDs()
	u := &unit{commit: func() { e.rulesWritten(d, ids); e.hook = d.kernelHook() }}
	var elemOps []func(*knftables.Transaction)
	if d.epMap != nil {
		// nft adds a rule that reads a numgen map only with the map.
		m := s.sets[d.epMap.name]
		spec := *d.epMap
		spec.size = s.epMapSize(spec.name, m, s.epMapOutgrown(spec.name, m))
		elemOps = s.bindEndpointMap(u, &spec, m, true)
	}
	return slices.Concat(u.ops, ruleOps(d, ids), elemOps), u.commit
}

// verdictOps deletes (del) or adds back r's verdict elements: the kernel's
// value goes before the chains it names are deleted or flushed, render's
// comes once they are written.
func (s *store) verdictOps(r *replacement, del bool) []func(*knftables.Transaction) {
	var ops []func(*knftables.Transaction)
	for _, k := range r.elems {
		set := s.setOf(k)
		key := spellKey(set, k.key)
		if _, present := s.mapElems.Kernel(k); del && present {
			el := elementObject(set, true, key, "")
			ops = append(ops, func(tx *knftables.Transaction) { tx.Delete(el) })
		}
		if want, ok := s.mapElems.Want(k); !del && ok {
			el := elementObject(set, true, key, want)
			ops = append(ops, func(tx *knftables.Transaction) { tx.Add(el) })
		}
	}
	return ops
}

// commitVerdict records that the kernel holds the verdict element k as
// render wants it, or not at all.
func (s *store) commitVerdict(k elemKey) {
	if want, ok := s.mapElems.Want(k); ok {
		s.mapElems.SetKernel(k, want)
		return
	}
	s.mapElems.DropKernel(k)
}
