package model

import (
	"hash/maphash"
	"iter"

	"github.com/svcproxy/svcproxy/pkg/proxy"
)

// shardCount is the number of shards of a PortMap. An edit clones only the
// shards it touches plus this many pointers, so at 10k service ports an edit
// copies about 40 entries instead of 10k.
const shardCount = 256

// shardSeed is shared by every PortMap so that shards line up between the
// successive versions a Tracker produces.
var shardSeed = maphash.MakeSeed()

type shardArray[V any] [shardCount]map[proxy.ServicePortName]V

// PortMap is an immutable map from service port name to V. It is persistent:
// editing it (PortMapEditor) yields a new PortMap that shares every shard the
// edit did not touch with the old one, which stays valid and unchanged.
// The zero value is an empty map.
type PortMap[V any] struct {
	shards *shardArray[V]
	n      int
}

// NewPortMap returns a PortMap holding a copy of m's entries.
func NewPortMap[V any](m map[proxy.ServicePortName]V) PortMap[V] {
	var e PortMapEditor[V]
	for k, v := range m {
		e.Set(k, v)
	}
	return e.Done()
}

func shardOf(name proxy.ServicePortName) int {
	return int(maphash.Comparable(shardSeed, name) % shardCount)
}

// Get returns the value for name and whether it is present.
func (m PortMap[V]) Get(name proxy.ServicePortName) (V, bool) {
	if m.shards == nil {
		var zero V
		return zero, false
	}
	v, ok := m.shards[shardOf(name)][name]
	return v, ok
}

// Len returns the number of entries.
func (m PortMap[V]) Len() int { return m.n }

// All iterates over every entry, in no particular order.
func (m PortMap[V]) All() iter.Seq2[proxy.ServicePortName, V] {
	return func(yield func(proxy.ServicePortName, V) bool) {
		if m.shards == nil {
			return
		}
		for _, shard := range m.shards {
			for k, v := range shard {
				if !yield(k, v) {
					return
				}
			}
		}
	}
}

// Keys iterates over every name, in no particular order.
func (m PortMap[V]) Keys() iter.Seq[proxy.ServicePortName] {
	return func(yield func(proxy.ServicePortName) bool) {
		for k := range m.All() {
			if !yield(k) {
				return
			}
		}
	}
}

// With returns m with name mapped to v; m is unchanged. For many edits, a
// PortMapEditor copies each touched shard once instead of once per edit.
func (m PortMap[V]) With(name proxy.ServicePortName, v V) PortMap[V] {
	e := NewPortMapEditor(m)
	e.Set(name, v)
	return e.Done()
}

// Without returns m without name; m is unchanged.
func (m PortMap[V]) Without(name proxy.ServicePortName) PortMap[V] {
	e := NewPortMapEditor(m)
	e.Remove(name)
	return e.Done()
}

// PortMapEditor derives a new PortMap from a base one, cloning each shard at
// most once, on its first write; the base is never modified, so a PortMap
// already handed out stays immutable. The zero value edits an empty map.
type PortMapEditor[V any] struct {
	base   PortMap[V]
	shards *shardArray[V]
	owned  [shardCount]bool
	n      int
}

// NewPortMapEditor starts an edit of base.
func NewPortMapEditor[V any](base PortMap[V]) *PortMapEditor[V] {
	return &PortMapEditor[V]{base: base, n: base.n}
}

// shard returns a writable shard i, copying the pointer array and the shard
// itself on first use.
func (e *PortMapEditor[V]) shard(i int) map[proxy.ServicePortName]V {
	if e.shards == nil {
		e.shards = new(shardArray[V])
		if e.base.shards != nil {
			*e.shards = *e.base.shards
		}
	}
	if !e.owned[i] {
		old := e.shards[i]
		clone := make(map[proxy.ServicePortName]V, len(old)+1)
		for k, v := range old {
			clone[k] = v
		}
		e.shards[i] = clone
		e.owned[i] = true
	}
	return e.shards[i]
}

// Set maps name to v.
func (e *PortMapEditor[V]) Set(name proxy.ServicePortName, v V) {
	s := e.shard(shardOf(name))
	if _, exists := s[name]; !exists {
		e.n++
	}
	s[name] = v
}

// Remove deletes name, if present.
func (e *PortMapEditor[V]) Remove(name proxy.ServicePortName) {
	i := shardOf(name)
	if e.shards == nil && e.base.shards == nil {
		return
	}
	if _, ok := e.current(i)[name]; !ok {
		return
	}
	delete(e.shard(i), name)
	e.n--
}

func (e *PortMapEditor[V]) current(i int) map[proxy.ServicePortName]V {
	if e.shards != nil {
		return e.shards[i]
	}
	return e.base.shards[i]
}

// Done returns the edited map. The editor must not be used afterwards.
func (e *PortMapEditor[V]) Done() PortMap[V] {
	if e.shards == nil {
		return PortMap[V]{shards: e.base.shards, n: e.n}
	}
	return PortMap[V]{shards: e.shards, n: e.n}
}
