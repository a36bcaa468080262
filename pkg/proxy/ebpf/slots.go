package ebpf

// stabilize moves want's endpoints to the slots they hold in have, where a
// group is in both: an endpoint that stays keeps its slot, a new one takes
// a freed slot or goes to the end, and when the group shrinks the
// endpoints above its new count move down into the holes. So a change
// rewrites only the slots it must, and ClientIP affinity, which remembers
// a client's slot, survives other endpoints' coming and going. Rendering
// stays pure; this is bookkeeping against what the maps hold.
func stabilize(have, want *Contents) {
	oldCount := map[uint64]uint32{}
	for _, v := range have.Services {
		for _, tg := range v.ids() {
			oldCount[tg.ID] = tg.Count
		}
	}
	newCount := map[uint64]uint32{}
	for _, v := range want.Services {
		for _, tg := range v.ids() {
			newCount[tg.ID] = tg.Count
		}
	}
	for id, n := range newCount {
		if o, ok := oldCount[id]; ok && n > 0 && o > 0 {
			restack(id, o, n, have.Backends, want.Backends)
		}
	}
}

// restack rewrites want's n slots of group id so that endpoints keep the
// slots they have among have's o.
func restack(id uint64, o, n uint32, have, want map[beKey]beVal) {
	wanted := make(map[beVal]bool, n)
	for s := range n {
		wanted[want[beKey{ID: id, Slot: s}]] = true
	}
	slots := make([]beVal, n)
	filled := make([]bool, n)
	var moved []beVal
	for s := range o {
		be, ok := have[beKey{ID: id, Slot: s}]
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
	for s := range n {
		if be := want[beKey{ID: id, Slot: s}]; wanted[be] {
			fresh = append(fresh, be)
		}
	}
	fill := append(moved, fresh...)
	for s := range n {
		if !filled[s] {
			slots[s], fill = fill[0], fill[1:]
		}
	}
	for s, be := range slots {
		want[beKey{ID: id, Slot: uint32(s)}] = be
	}
}
