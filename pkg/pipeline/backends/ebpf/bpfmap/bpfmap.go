// Package bpfmap is the BPF map side of the eBPF backend's reconciliation
// (pkg/pipeline/reconcile): batch writes, deletes and read-backs of a map,
// shared by the socket hooks' maps and the tc programs' maps.
package bpfmap

import (
	"errors"
	"fmt"

	"github.com/cilium/ebpf"

	"github.com/svcproxy/svcproxy/pkg/pipeline/reconcile"
)

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

// Kind is the reconcile.Kind of a map's entries, named name: a value
// compares as its bytes do, and an entry is written with one put whether
// it is new or changed, so adds and updates share the phase put; deletes
// run in phase del.
func Kind[K, V comparable](name string, put, del int) reconcile.Kind[K, V] {
	return reconcile.Kind[K, V]{Name: name, Equal: func(want, have V) bool { return want == have },
		AddPhase: put, UpdatePhase: put, DeletePhase: del}
}

// Writer writes and deletes a map's entries in batches: a BPF map
// (Table), or a test's recorder.
type Writer[K, V any] interface {
	Put(keys []K, vals []V) error
	Del(keys []K) error
}

// Write is how reconcile.Batch applies one phase of a map's changes: in
// one batch, all of them writes or all of them deletes (a kind's phases
// never mix the two). what names the map's entries in the error.
func Write[K comparable, V any](t Writer[K, V], what string) func([]reconcile.Change[K, V]) error {
	return func(cs []reconcile.Change[K, V]) error {
		keys := make([]K, len(cs))
		for i, c := range cs {
			keys[i] = c.Key
		}
		if cs[0].Op == reconcile.Delete {
			if err := t.Del(keys); err != nil {
				return fmt.Errorf("deleting %s: %w", what, err)
			}
			return nil
		}
		vals := make([]V, len(cs))
		for i, c := range cs {
			vals[i] = c.Want
		}
		if err := t.Put(keys, vals); err != nil {
			return fmt.Errorf("writing %s: %w", what, err)
		}
		return nil
	}
}
