package ebpf

import (
	"github.com/cilium/ebpf"

	"github.com/svcproxy/svcproxy/pkg/proxy/ebpf/bpfmap"
)

// table is one map as the apply step sees it: batch writes and deletes,
// and a dump for read-back. The kernel's maps and the tests' recorder
// implement it.
type table[K, V comparable] interface {
	put(keys []K, vals []V) error
	del(keys []K) error
	dump() (map[K]V, error)
}

// tables are the two maps svcproxy writes.
type tables struct {
	services table[svcKey, svcVal]
	backends table[beKey, beVal]
}

// apply writes the difference between have and want, in the order that
// keeps every frontend usable throughout: a service record is written only
// after every slot it counts, and a slot deleted only after no record
// counts it. It returns how many entries it wrote or deleted.
func apply(t tables, have, want *Contents) (int, error) {
	bPut, bVals, bDel := bpfmap.Diff(have.Backends, want.Backends)
	sPut, sVals, sDel := bpfmap.Diff(have.Services, want.Services)
	return bpfmap.Apply([]bpfmap.Step{
		{What: "writing endpoint slots", N: len(bPut), Do: func() error { return t.backends.put(bPut, bVals) }},
		{What: "writing service records", N: len(sPut), Do: func() error { return t.services.put(sPut, sVals) }},
		{What: "deleting service records", N: len(sDel), Do: func() error { return t.services.del(sDel) }},
		{What: "deleting endpoint slots", N: len(bDel), Do: func() error { return t.backends.del(bDel) }},
	})
}

// kernelTable is a table over a BPF map.
type kernelTable[K, V comparable] struct{ m *ebpf.Map }

func (t kernelTable[K, V]) put(keys []K, vals []V) error {
	return bpfmap.Table[K, V]{M: t.m}.Put(keys, vals)
}

func (t kernelTable[K, V]) del(keys []K) error { return bpfmap.Table[K, V]{M: t.m}.Del(keys) }

func (t kernelTable[K, V]) dump() (map[K]V, error) { return bpfmap.Table[K, V]{M: t.m}.Dump() }

// each calls fn with every entry of the map, a batch at a time.
func (t kernelTable[K, V]) each(fn func(K, V) error) error {
	return bpfmap.Table[K, V]{M: t.m}.Each(fn)
}
