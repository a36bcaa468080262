package ebpf

import (
	"github.com/cilium/ebpf"

	"github.com/svcproxy/svcproxy/pkg/pipeline/backends/ebpf/bpfmap"
)

// table is one map as the apply step sees it: batch writes and deletes,
// and a dump for read-back. The kernel's maps and the tests' recorder
// implement it.
type table[K, V comparable] interface {
	bpfmap.Writer[K, V]
	dump() (map[K]V, error)
}

// tables are the two maps svcproxy writes.
type tables struct {
	services table[svcKey, svcVal]
	backends table[beKey, beVal]
}

// kernelTable is a table over a BPF map.
type kernelTable[K, V comparable] struct{ m *ebpf.Map }

func (t kernelTable[K, V]) Put(keys []K, vals []V) error {
	return bpfmap.Table[K, V]{M: t.m}.Put(keys, vals)
}

func (t kernelTable[K, V]) Del(keys []K) error { return bpfmap.Table[K, V]{M: t.m}.Del(keys) }

func (t kernelTable[K, V]) dump() (map[K]V, error) { return bpfmap.Table[K, V]{M: t.m}.Dump() }

// each calls fn with every entry of the map, a batch at a time.
func (t kernelTable[K, V]) each(fn func(K, V) error) error {
	return bpfmap.Table[K, V]{M: t.m}.Each(fn)
}
