package ebpf

import (
	"errors"
	"fmt"

	"github.com/cilium/ebpf"
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
	bPut, bVals, bDel := diff(have.Backends, want.Backends)
	sPut, sVals, sDel := diff(have.Services, want.Services)
	steps := []struct {
		what string
		n    int
		do   func() error
	}{
		{"writing endpoint slots", len(bPut), func() error { return t.backends.put(bPut, bVals) }},
		{"writing service records", len(sPut), func() error { return t.services.put(sPut, sVals) }},
		{"deleting service records", len(sDel), func() error { return t.services.del(sDel) }},
		{"deleting endpoint slots", len(bDel), func() error { return t.backends.del(bDel) }},
	}
	n := 0
	for _, s := range steps {
		if s.n == 0 {
			continue
		}
		if err := s.do(); err != nil {
			return n, fmt.Errorf("%s: %w", s.what, err)
		}
		n += s.n
	}
	return n, nil
}

// diff returns the keys to write (with their values) and to delete so that
// have becomes want.
func diff[K, V comparable](have, want map[K]V) (put []K, vals []V, del []K) {
	for k, v := range want {
		if old, ok := have[k]; !ok || old != v {
			put = append(put, k)
			vals = append(vals, v)
		}
	}
	for k := range have {
		if _, ok := want[k]; !ok {
			del = append(del, k)
		}
	}
	return put, vals, del
}

// kernelTable is a table over a BPF map.
type kernelTable[K, V comparable] struct{ m *ebpf.Map }

func (t kernelTable[K, V]) put(keys []K, vals []V) error {
	_, err := t.m.BatchUpdate(keys, vals, nil)
	return err
}

func (t kernelTable[K, V]) del(keys []K) error {
	_, err := t.m.BatchDelete(keys, nil)
	if errors.Is(err, ebpf.ErrKeyNotExist) {
		// Someone removed an entry behind svcproxy's back: it is gone
		// either way, but the batch stopped there; finish one by one.
		for _, k := range keys {
			if err := t.m.Delete(k); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
				return err
			}
		}
		return nil
	}
	return err
}

// dumpBatch is how many entries a read-back asks the kernel for at once; a
// hash map's batch must hold its fullest bucket.
const dumpBatch = 4096

func (t kernelTable[K, V]) dump() (map[K]V, error) {
	out := map[K]V{}
	err := t.each(func(k K, v V) error { out[k] = v; return nil })
	if err != nil {
		return nil, err
	}
	return out, nil
}

// each calls fn with every entry of the map, a batch at a time.
func (t kernelTable[K, V]) each(fn func(K, V) error) error {
	keys, vals := make([]K, dumpBatch), make([]V, dumpBatch)
	var cursor ebpf.MapBatchCursor
	for {
		n, err := t.m.BatchLookup(&cursor, keys, vals, nil)
		for i := range n {
			if ferr := fn(keys[i], vals[i]); ferr != nil {
				return ferr
			}
		}
		if errors.Is(err, ebpf.ErrKeyNotExist) {
			return nil
		}
		if err != nil {
			return err
		}
	}
}
