package nodeport

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"slices"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"github.com/svcproxy/svcproxy/pkg/pipeline/maglev"
	"github.com/svcproxy/svcproxy/pkg/proxy"
)

// np_maglev holds one Maglev table per group, an array of its slots'
// endpoints swapped in whole (bpf/nodeport.c). The store keeps one entry
// per table, not per slot: its size and a hash of its endpoints, from
// which the table is built only when it is written. A table is a function
// of its endpoint set (maglev pins it, so that nodes agree), so equal
// entries are equal tables.

// maglevVal is a table as the store compares it: Size slots built from
// the endpoints whose hash is Sum. A table read back that is not the one
// its endpoints build (an older svcproxy's, or written by hand) has Size
// 0, which nothing renders: it is rewritten.
type maglevVal struct {
	Size uint32
	Sum  uint64
}

// maglevOf is the table of eps, and eps in the order the table takes
// them: sorted, without duplicates.
func maglevOf[A addrBytes](eps []proxy.Endpoint) (maglevVal, []proxy.Endpoint) {
	set := make([]proxy.Endpoint, len(eps))
	for i, ep := range eps {
		set[i] = proxy.Endpoint{IP: ep.IP.Unmap(), Port: ep.Port}
	}
	slices.SortFunc(set, proxy.Endpoint.Compare)
	set = slices.Compact(set)
	size, _ := maglev.TableSize(len(set))
	h := fnv.New64a()
	for _, ep := range set {
		v := endpointVal[A](ep)
		_, _ = h.Write(netipOf(v.Addr).AsSlice())
		_, _ = h.Write(v.Port[:])
	}
	return maglevVal{Size: uint32(size), Sum: h.Sum64()}, set
}

// maglevSlots is the table of eps as np_maglev's arrays hold it.
func maglevSlots[A addrBytes](eps []proxy.Endpoint) []beValOf[A] {
	t := maglev.New(eps)
	out := make([]beValOf[A], len(t.Slots))
	for i, b := range t.Slots {
		out[i] = endpointVal[A](t.Backends[b])
	}
	return out
}

// maglevTables writes np_maglev: each table into a new array, swapped in
// with one update of the group's entry, so that a flow sees the old table
// or the new one, never a mix. The arrays are built from the endpoints
// of the State being written.
type maglevTables[A addrBytes] struct {
	outer     *ebpf.Map
	endpoints map[uint64][]proxy.Endpoint
}

func (t maglevTables[A]) Put(ids []uint64, vals []maglevVal) error {
	for i, id := range ids {
		if err := t.swap(id, vals[i]); err != nil {
			return err
		}
	}
	return nil
}

func (t maglevTables[A]) swap(id uint64, v maglevVal) error {
	slots := maglevSlots[A](t.endpoints[id])
	if len(slots) != int(v.Size) {
		return fmt.Errorf("group %#x: a table of %d slots for size %d", id, len(slots), v.Size)
	}
	inner, err := ebpf.NewMap(&ebpf.MapSpec{Type: ebpf.Array, KeySize: 4, ValueSize: uint32(binary.Size(slots[0])),
		MaxEntries: v.Size, Flags: unix.BPF_F_INNER_MAP})
	if err != nil {
		return fmt.Errorf("creating a Maglev table of %d slots: %w", v.Size, err)
	}
	defer inner.Close()
	if _, err := inner.BatchUpdate(slotKeys(len(slots)), slots, nil); err != nil {
		return err
	}
	return t.outer.Update(id, inner, ebpf.UpdateAny)
}

// slotKeys are the keys of a table's n slots.
func slotKeys(n int) []uint32 {
	keys := make([]uint32, n)
	for i := range keys {
		keys[i] = uint32(i)
	}
	return keys
}

// Del removes tables; the kernel frees an array when no program holds it.
func (t maglevTables[A]) Del(ids []uint64) error {
	for _, id := range ids {
		if err := t.outer.Delete(id); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			return err
		}
	}
	return nil
}

// readMaglev reads np_maglev's tables back into the store's kernel side,
// each as maglevVal of the endpoints it holds when it is the table they
// build, else with Size 0.
func (s *store[A]) readMaglev(outer *ebpf.Map) error {
	s.maglev.ForgetKernel()
	var id uint64
	var inner ebpf.MapID
	it := outer.Iterate()
	for it.Next(&id, &inner) {
		v, err := readTable[A](inner)
		if err != nil {
			return fmt.Errorf("reading back Maglev table %#x: %w", id, err)
		}
		s.maglev.SetKernel(id, v)
	}
	if err := it.Err(); err != nil {
		return fmt.Errorf("reading back the Maglev tables: %w", err)
	}
	return nil
}

func readTable[A addrBytes](id ebpf.MapID) (maglevVal, error) {
	m, err := ebpf.NewMapFromID(id)
	if err != nil {
		return maglevVal{}, err
	}
	defer m.Close()
	// One batch reads the whole array: its keys are its slots.
	slots := make([]beValOf[A], m.MaxEntries())
	var cursor ebpf.MapBatchCursor
	n, err := m.BatchLookup(&cursor, slotKeys(len(slots)), slots, nil)
	if err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
		return maglevVal{}, err
	}
	distinct := map[beValOf[A]]bool{}
	var eps []proxy.Endpoint
	for _, b := range slots[:n] {
		if !distinct[b] {
			distinct[b] = true
			ap := b.AddrPort()
			eps = append(eps, proxy.Endpoint{IP: ap.Addr(), Port: ap.Port()})
		}
	}
	v, set := maglevOf[A](eps)
	if n != len(slots) || !slices.Equal(maglevSlots[A](set), slots) {
		v.Size = 0
	}
	return v, nil
}
