// Package bpfmap writes the difference between what a BPF map holds and
// what it should hold, in batches, for the eBPF backend's renderers (the
// socket hooks' maps and the tc programs' maps).
package bpfmap

import (
	"errors"
	"fmt"

	"github.com/cilium/ebpf"
)

// Diff returns the keys to write (with their values) and to delete so that
// have becomes want.
func Diff[K, V comparable](have, want map[K]V) (put []K, vals []V, del []K) {
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

// Table is a BPF map of K to V.
type Table[K, V comparable] struct{ M *ebpf.Map }

// Put writes keys with vals in one batch.
func (t Table[K, V]) Put(keys []K, vals []V) error {
	if len(keys) == 0 {
		return nil
	}
	_, err := t.M.BatchUpdate(keys, vals, nil)
	return err
}

// Del deletes keys; a key already gone is not an error.
func (t Table[K, V]) Del(keys []K) error {
	if len(keys) == 0 {
		return nil
	}
	_, err := t.M.BatchDelete(keys, nil)
	if errors.Is(err, ebpf.ErrKeyNotExist) {
		// Someone removed an entry behind svcproxy's back: it is gone
		// either way, but the batch stopped there; finish one by one.
		for _, k := range keys {
			if err := t.M.Delete(k); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
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

// Dump reads the whole map.
func (t Table[K, V]) Dump() (map[K]V, error) {
	out := map[K]V{}
	if err := t.Each(func(k K, v V) error { out[k] = v; return nil }); err != nil {
		return nil, err
	}
	return out, nil
}

// Each calls fn with every entry of the map, a batch at a time; it stops
// at fn's first error.
func (t Table[K, V]) Each(fn func(K, V) error) error {
	keys, vals := make([]K, dumpBatch), make([]V, dumpBatch)
	var cursor ebpf.MapBatchCursor
	for {
		n, err := t.M.BatchLookup(&cursor, keys, vals, nil)
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

// Step is one batch of an apply: what it does (for the error), how many
// entries it writes or deletes, and the batch itself.
type Step struct {
	What string
	N    int
	Do   func() error
}

// Apply runs the steps with entries, in order, and returns how many
// entries they wrote or deleted; it stops at the first failure.
func Apply(steps []Step) (int, error) {
	n := 0
	for _, s := range steps {
		if s.N == 0 {
			continue
		}
		if err := s.Do(); err != nil {
			return n, fmt.Errorf("%s: %w", s.What, err)
		}
		n += s.N
	}
	return n, nil
}
