package ebpf

import "github.com/svcproxy/svcproxy/pkg/pipeline/reconcile"

// stabilize moves pt's endpoints to the slots they hold in the maps, where
// a group is in both: an endpoint that stays keeps its slot, a new one
// takes a freed slot or goes to the end, and when the group shrinks the
// endpoints above its new count move down into the holes. So a change
// rewrites only the slots it must, and ClientIP affinity, which remembers
// a client's slot, survives other endpoints' coming and going. Rendering
// stays pure; this is bookkeeping against what the maps hold.
func (s *store) stabilize(pt *part) {
	oldCount := map[uint64]uint32{}
	for _, it := range pt.records {
		if have, ok := s.records.Kernel(it.Key); ok {
			for _, tg := range have.ids() {
				oldCount[tg.ID] = tg.Count
			}
		}
	}
	for _, g := range pt.groups {
		want := pt.slots[g.first : g.first+g.count]
		if o := oldCount[g.id]; o > 0 && g.count > 0 && !inPlace(g.id, o, want, s.slots.Kernel) {
			restack(g.id, o, want, s.slots.Kernel)
		}
	}
}

// inPlace reports whether the maps hold want, the slots of group id, as
// they are: the usual case of a full sync, which so moves nothing.
func inPlace(id uint64, o uint32, want []reconcile.Item[beKey, beVal], have func(beKey) (beVal, bool)) bool {
	if int(o) != len(want) {
		return false
	}
	for _, it := range want {
		if be, ok := have(it.Key); !ok || be != it.Value {
			return false
		}
	}
	return true
}

// restack rewrites want, the slots of group id in slot order, so that
// endpoints keep the slots they have among the o the maps hold (have).
func restack(id uint64, o uint32, want []reconcile.Item[beKey, beVal], have func(beKey) (beVal, bool)) {
	n := uint32(len(want))
	wanted := make(map[beVal]bool, n)
	for _, it := range want {
		wanted[it.Value] = true
	}
	slots := make([]beVal, n)
	filled := make([]bool, n)
	var moved []beVal
	for s := range o {
		be, ok := have(beKey{ID: id, Slot: s})
		if !ok || !wanted[be] {
			continue
		}
		delete(wanted, be)
		if s < n {
			slots[s], filled[s] = be, true
		} else {
			moved = append(moved, be)
		}
	}
	// The rest (new endpoints, then those above the new count) fill the
	// holes in order; new ones in want's order, so the result is stable.
	var fresh []beVal
	for _, it := range want {
		if wanted[it.Value] {
			fresh = append(fresh, it.Value)
		}
	}
	fill := append(moved, fresh...)
	for s := range n {
		if !filled[s] {
			slots[s], fill = fill[0], fill[1:]
		}
	}
	for s, be := range slots {
		want[s].Value = be
	}
}
