package nodeport

import (
	"errors"
	"fmt"

	"github.com/cilium/ebpf"

	"github.com/svcproxy/svcproxy/pkg/pipeline/backends/ebpf/bpfmap"
	"github.com/svcproxy/svcproxy/pkg/pipeline/reconcile"
)

// whole is the one owner of the maps' entries: Sync renders the whole
// State every time, so there is nothing to gain from claims per port.
type whole struct{}

func (whole) Compare(whole) int { return 0 }

// Phases keep every frontend usable throughout a sync: a frontend is
// written only after every slot (and Maglev table) it counts, the source
// ranges and affinity members it checks, the tunnels and peers its DSR
// flows take and come from, and the configuration it masquerades with,
// and any of these deleted only after no frontend counts on it.
const (
	phaseSlotPut = iota
	phaseMaglevPut
	phaseRangePut
	phaseMemberPut
	phaseTunnelPut
	phasePeerPut
	phaseConfigPut
	phaseFrontendPut
	phaseFrontendDel
	phasePeerDel
	phaseTunnelDel
	phaseMemberDel
	phaseRangeDel
	phaseMaglevDel
	phaseSlotDel
)

// store is the maps of A's family as the reconciliation engine keeps
// them: what the render claims, what the maps hold, and when they must be
// read back.
type store[A addrBytes] struct {
	syncs     reconcile.Syncs
	frontends *reconcile.Table[whole, svcKeyOf[A], svcVal]
	slots     *reconcile.Table[whole, beKey, beValOf[A]]
	maglev    *reconcile.Table[whole, uint64, maglevVal]
	ranges    *reconcile.Table[whole, srcKeyOf[A], uint32]
	members   *reconcile.Table[whole, memberKeyOf[A], uint32]
	tunnels   *reconcile.Table[whole, A, tunnelOf[A]]
	peers     *reconcile.Table[whole, A, peerVal]
	config    *reconcile.Table[whole, uint32, cfgValOf[A]]
}

func newStore[A addrBytes]() *store[A] {
	return &store[A]{
		frontends: reconcile.NewTable[whole](bpfmap.Kind[svcKeyOf[A], svcVal]("frontends", phaseFrontendPut, phaseFrontendDel)),
		slots:     reconcile.NewTable[whole](bpfmap.Kind[beKey, beValOf[A]]("endpoint slots", phaseSlotPut, phaseSlotDel)),
		maglev:    reconcile.NewTable[whole](bpfmap.Kind[uint64, maglevVal]("Maglev tables", phaseMaglevPut, phaseMaglevDel)),
		ranges:    reconcile.NewTable[whole](bpfmap.Kind[srcKeyOf[A], uint32]("source ranges", phaseRangePut, phaseRangeDel)),
		members:   reconcile.NewTable[whole](bpfmap.Kind[memberKeyOf[A], uint32]("affinity members", phaseMemberPut, phaseMemberDel)),
		tunnels:   reconcile.NewTable[whole](bpfmap.Kind[A, tunnelOf[A]]("DSR tunnels", phaseTunnelPut, phaseTunnelDel)),
		peers:     reconcile.NewTable[whole](bpfmap.Kind[A, peerVal]("DSR peers", phasePeerPut, phasePeerDel)),
		// The configuration is an array's one entry, always claimed: it
		// is never deleted.
		config: reconcile.NewTable[whole](bpfmap.Kind[uint32, cfgValOf[A]]("the configuration", phaseConfigPut, phaseConfigPut)),
	}
}

// claim makes c everything the maps should hold: every key, claimed or in
// the maps, is diffed.
func (s *store[A]) claim(c *contentsOf[A]) {
	claimAll(s.frontends, c.Services)
	claimAll(s.slots, c.Backends)
	claimAll(s.maglev, c.Maglev)
	claimAll(s.ranges, c.Ranges)
	claimAll(s.members, c.Members)
	claimAll(s.tunnels, c.Tunnels)
	claimAll(s.peers, c.Peers)
	claimAll(s.config, map[uint32]cfgValOf[A]{0: c.Config})
}

func claimAll[K comparable, V any](t *reconcile.Table[whole, K, V], m map[K]V) {
	items := make([]reconcile.Item[K, V], 0, len(m))
	for k, v := range m {
		items = append(items, reconcile.Item[K, V]{Key: k, Value: v})
	}
	t.ResetClaims()
	t.Replace(whole{}, items)
}

// tables are the maps the store writes: the kernel's, or a test's
// recorders.
type tables[A addrBytes] struct {
	frontends bpfmap.Writer[svcKeyOf[A], svcVal]
	slots     bpfmap.Writer[beKey, beValOf[A]]
	maglev    bpfmap.Writer[uint64, maglevVal]
	ranges    bpfmap.Writer[srcKeyOf[A], uint32]
	members   bpfmap.Writer[memberKeyOf[A], uint32]
	tunnels   bpfmap.Writer[A, tunnelOf[A]]
	peers     bpfmap.Writer[A, peerVal]
	config    bpfmap.Writer[uint32, cfgValOf[A]]
}

// tablesOf is the kernel's maps of A's family, writing the Maglev tables
// of want.
func tablesOf[A addrBytes](maps map[string]*ebpf.Map, want *contentsOf[A]) tables[A] {
	n := namesOf[A]()
	return tables[A]{
		frontends: bpfmap.Table[svcKeyOf[A], svcVal]{M: maps[n.services]},
		slots:     bpfmap.Table[beKey, beValOf[A]]{M: maps[n.backends]},
		maglev:    maglevTables[A]{outer: maps[n.maglev], endpoints: want.maglevEndpoints},
		ranges:    oneByOne[srcKeyOf[A], uint32]{maps[n.ranges]},
		members:   bpfmap.Table[memberKeyOf[A], uint32]{M: maps[n.members]},
		tunnels:   tunnelTable[A]{maps[n.tunnels]},
		peers:     bpfmap.Table[A, peerVal]{M: maps[n.peers]},
		config:    bpfmap.Table[uint32, cfgValOf[A]]{M: maps[n.config]},
	}
}

// write applies the difference to t in phase order and returns how many
// entries it wrote or deleted; it stops at the first failure (what
// follows may count on it), after which the maps are read back.
func (s *store[A]) write(t tables[A]) (int, error) {
	n, err := reconcile.RunUntilFailure(
		reconcile.Batch(s.slots, bpfmap.Write(t.slots, "endpoint slots")),
		reconcile.Batch(s.maglev, bpfmap.Write(t.maglev, "Maglev tables")),
		reconcile.Batch(s.ranges, bpfmap.Write(t.ranges, "source ranges")),
		reconcile.Batch(s.members, bpfmap.Write(t.members, "affinity members")),
		reconcile.Batch(s.tunnels, bpfmap.Write(t.tunnels, "DSR tunnels")),
		reconcile.Batch(s.peers, bpfmap.Write(t.peers, "DSR peers")),
		reconcile.Batch(s.config, bpfmap.Write(t.config, "the configuration")),
		reconcile.Batch(s.frontends, bpfmap.Write(t.frontends, "frontends")))
	if err != nil {
		s.syncs.Failed()
		return n, fmt.Errorf("tc node ports: %w", err)
	}
	return n, nil
}

// readBack makes what maps hold the store's kernel side.
func (s *store[A]) readBack(maps map[string]*ebpf.Map) error {
	n := namesOf[A]()
	if err := readInto(s.frontends, maps, n.services); err != nil {
		return err
	}
	if err := readInto(s.slots, maps, n.backends); err != nil {
		return err
	}
	if err := s.readMaglev(maps[n.maglev]); err != nil {
		return err
	}
	if err := readInto(s.config, maps, n.config); err != nil {
		return err
	}
	if err := readEach(s.ranges, maps, n.ranges); err != nil {
		return err
	}
	if err := readInto(s.members, maps, n.members); err != nil {
		return err
	}
	if err := readTunnels(s.tunnels, maps, n.tunnels); err != nil {
		return err
	}
	if err := readInto(s.peers, maps, n.peers); err != nil {
		return err
	}
	s.syncs.ReadDone()
	return nil
}

func readInto[K, V comparable](t *reconcile.Table[whole, K, V], maps map[string]*ebpf.Map, name string) error {
	t.ForgetKernel()
	err := bpfmap.Table[K, V]{M: maps[name]}.Each(func(k K, v V) error {
		t.SetKernel(k, v)
		return nil
	})
	if err != nil {
		return fmt.Errorf("reading back %s: %w", name, err)
	}
	return nil
}

// oneByOne writes an LPM trie, which has no batch operations, an entry at
// a time.
type oneByOne[K, V any] struct{ m *ebpf.Map }

func (t oneByOne[K, V]) Put(keys []K, vals []V) error {
	for i, k := range keys {
		if err := t.m.Put(k, vals[i]); err != nil {
			return err
		}
	}
	return nil
}

func (t oneByOne[K, V]) Del(keys []K) error {
	for _, k := range keys {
		if err := t.m.Delete(k); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			return err
		}
	}
	return nil
}

// readEach is readInto for a map without batch lookups.
func readEach[K, V comparable](t *reconcile.Table[whole, K, V], maps map[string]*ebpf.Map, name string) error {
	t.ForgetKernel()
	var k K
	var v V
	it := maps[name].Iterate()
	for it.Next(&k, &v) {
		t.SetKernel(k, v)
	}
	if err := it.Err(); err != nil {
		return fmt.Errorf("reading back %s: %w", name, err)
	}
	return nil
}

// emptied forgets what the kernel's maps of the family that grows hold:
// the next write goes to new, empty maps (grow). np_peers, whose size
// no State sets, is shared and kept.
func (s *store[A]) emptied() {
	s.frontends.ForgetKernel()
	s.slots.ForgetKernel()
	s.maglev.ForgetKernel()
	s.ranges.ForgetKernel()
	s.members.ForgetKernel()
	s.tunnels.ForgetKernel()
	s.config.ForgetKernel()
}
