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
		if o := oldCount[g.id]; o > 0 && g.count > 0 {
			s.keepSlots(g.id, o, want)
		}
	}
}

// keepSlots rewrites want, the slots of group id in slot order, so that
// endpoints keep the slots they have among the o the maps hold.
func (s *store) keepSlots(id uint64, o uint32, want []reconcile.Item[beKey, beVal]) {
	s.values = s.values[:0]
	for _, it := range want {
		s.values = append(s.values, it.Value)
	}
	held := func(slot int) (beVal, bool) { return s.slots.Kernel(beKey{ID: id, Slot: uint32(slot)}) }
	for slot, be := range reconcile.KeepSlots(s.values, int(o), held) {
		want[slot].Value = be
	}
}
