package ebpf

import (
	"fmt"
	"slices"

	"github.com/svcproxy/svcproxy/pkg/pipeline/backends/ebpf/bpfmap"
	"github.com/svcproxy/svcproxy/pkg/pipeline/desired"
	"github.com/svcproxy/svcproxy/pkg/pipeline/reconcile"
	"github.com/svcproxy/svcproxy/pkg/proxy"
)

// owner is the service port that claims map entries.
type owner = proxy.ServicePortName

// Phases keep every frontend usable throughout a sync: a service record is
// written only after every slot it counts, and a slot deleted only after
// no record counts it.
const (
	phaseSlotPut = iota
	phaseRecordPut
	phaseRecordDel
	phaseSlotDel
)

var (
	recordKind = bpfmap.Kind[svcKey, svcVal]("service records", phaseRecordPut, phaseRecordDel)
	slotKind   = bpfmap.Kind[beKey, beVal]("endpoint slots", phaseSlotPut, phaseSlotDel)
)

// store is the two maps as the reconciliation engine keeps them: the
// entries each service port claims (the any-port record of a cluster IP is
// claimed by each of its ports, so it goes with the last), what the maps
// hold, and what a sync touched. Beside them, the group IDs each port's
// entries use (ids) and all of them (taken), which a port rendered alone
// probes past.
type store struct {
	syncs   reconcile.Syncs
	records *reconcile.Table[owner, svcKey, svcVal]
	slots   *reconcile.Table[owner, beKey, beVal]
	ids     map[owner][]uint64
	taken   map[uint64]bool
	// prev is the State the claims were last made for, when that sync
	// succeeded (scope).
	prev *desired.State
	// values is the buffer keepSlots lists a group's endpoints in.
	values []beVal
}

func newStore() *store {
	return &store{records: reconcile.NewTable[owner](recordKind), slots: reconcile.NewTable[owner](slotKind),
		ids: map[owner][]uint64{}, taken: map[uint64]bool{}}
}

// render renders every service port of st (full) or those of changed,
// a removed one as nil, in name order: group IDs are probed in that order,
// past those the other ports keep (taken).
func (s *store) render(st *desired.State, full bool, changed map[owner]struct{}) map[owner]*part {
	var names []owner
	if full {
		names = slices.AppendSeq(make([]owner, 0, st.Services.Len()), st.Services.Keys())
		// A port's groups: one, or two when its routes differ by source.
		s.taken = make(map[uint64]bool, len(names))
	} else {
		for name := range changed {
			names = append(names, name)
			for _, id := range s.ids[name] {
				delete(s.taken, id)
			}
		}
	}
	slices.SortFunc(names, proxy.ServicePortName.Compare)
	r := renderer{st: st, taken: s.taken, nodePortIPs: st.NodePortAddresses()}
	parts := make(map[owner]*part, len(names))
	for _, name := range names {
		parts[name] = nil
		if sp := st.Service(name); sp != nil {
			parts[name] = r.port(sp)
		}
	}
	return parts
}

// scope says which service ports a sync renders and claims again: every
// one (full) or those of changed. A PartialSync's are st.Changed. A
// FullSync after a successful sync, with the maps not to be read back and
// the same node port addresses, needs only the ports that differ from the
// last synced State's: the others' claims already hold what they render
// to, and the maps what was claimed, so claiming them again would change
// nothing but cost a render and a diff of every entry.
func (s *store) scope(st *desired.State, plan reconcile.Plan) (bool, map[owner]struct{}) {
	if !plan.Full {
		return false, st.Changed
	}
	if plan.ReadBack || !st.SameGlobals(s.prev) {
		return true, nil
	}
	return false, changedSince(st, s.prev)
}

// need bounds the entries of the larger map once parts are claimed.
func (s *store) need(parts map[owner]*part, full bool) int {
	records, slots := 0, 0
	if !full {
		records, slots = s.records.Len(), s.slots.Len()
	}
	for _, pt := range parts {
		if pt != nil {
			records, slots = records+len(pt.records), slots+len(pt.slots)
		}
	}
	return max(records, slots)
}

// claim stabilizes each part's slots against what the maps hold and swaps
// its port's claims for it, dropping the part from parts; a full sync
// drops every claim first.
func (s *store) claim(parts map[owner]*part, full bool) {
	s.prev = nil // until the sync's write succeeds
	if full {
		s.records.ResetClaims()
		s.slots.ResetClaims()
		if len(s.ids) == 0 {
			s.ids = make(map[owner][]uint64, len(parts))
		}
		clear(s.ids)
		records, slots := 0, 0
		for _, pt := range parts {
			if pt != nil {
				records, slots = records+len(pt.records), slots+len(pt.slots)
			}
		}
		s.records.Reserve(records)
		s.slots.Reserve(slots)
		s.records.ReserveOwners(len(parts))
		s.slots.ReserveOwners(len(parts))
	}
	for name, pt := range parts {
		delete(s.ids, name)
		if pt == nil {
			s.records.Replace(name, nil)
			s.slots.Replace(name, nil)
			continue
		}
		s.stabilize(pt)
		s.records.Replace(name, pt.records)
		s.slots.Replace(name, pt.slots)
		for _, g := range pt.groups {
			s.ids[name] = append(s.ids[name], g.id)
		}
		parts[name] = nil // the tables keep what they need of it
	}
}

// write applies the difference to t, in phase order, and returns how many
// entries it wrote or deleted. It stops at the first failure: the steps
// after it may count on it. A failed batch may have written part of its
// entries, which the kernel side does not record, so the maps must be
// read back before the next diff.
func (s *store) write(t tables) (int, error) {
	n, err := reconcile.RunUntilFailure(
		reconcile.Batch(s.slots, bpfmap.Write(t.backends, "endpoint slots")),
		reconcile.Batch(s.records, bpfmap.Write(t.services, "service records")))
	if err != nil {
		s.syncs.Failed()
	}
	return n, err
}

// readBack makes the maps' contents the store's kernel side, which the
// next diffs then trust.
func (s *store) readBack(t tables) error {
	records, err := t.services.dump()
	if err != nil {
		return fmt.Errorf("reading back the service map: %w", err)
	}
	slots, err := t.backends.dump()
	if err != nil {
		return fmt.Errorf("reading back the backend map: %w", err)
	}
	s.emptied()
	for k, v := range records {
		s.records.SetKernel(k, v)
	}
	for k, v := range slots {
		s.slots.SetKernel(k, v)
	}
	s.syncs.ReadDone()
	return nil
}

// emptied records that the maps hold nothing (new ones, before a
// read-back fills them): the next write writes every claim.
func (s *store) emptied() {
	s.records.ForgetKernel()
	s.slots.ForgetKernel()
	s.records.MarkAllDirty()
	s.slots.MarkAllDirty()
}

// changedSince returns the service ports of st that prev does not have as
// they are in st (new, changed or gone), by desired's equality of ports.
// With the same globals (node port addresses), a port equal to prev's
// renders to what its claims already hold.
func changedSince(st, prev *desired.State) map[owner]struct{} {
	changed := map[owner]struct{}{}
	for name, sp := range st.Services.All() {
		if !sp.Equal(prev.Service(name)) {
			changed[name] = struct{}{}
		}
	}
	for name := range prev.Services.Keys() {
		if st.Service(name) == nil {
			changed[name] = struct{}{}
		}
	}
	return changed
}
