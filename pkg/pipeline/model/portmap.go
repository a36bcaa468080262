package model

import (
	"cmp"
	"hash/maphash"
	"iter"
	"slices"

	"github.com/svcproxy/svcproxy/pkg/proxy"
)

// shardCount is the number of shards of a PortMap. An edit clones only the
// shards it touches plus this many pointers, so at 10k service ports an edit
// copies about 40 entries instead of 10k.
const shardCount = 256

// shardSeed is shared by every PortMap so that shards line up between the
// successive versions a Tracker produces, and so that a map built by
// iterating another (desired's from the snapshot's) receives each shard's
// entries in order and only appends.
var shardSeed = maphash.MakeSeed()

// PortNamer is a value that knows its own service port name. A PortMap
// does not store the name of an entry whose value is a PortNamer of that
// name (the model's and the desired State's ServicePorts): 64 bytes an
// entry. PortName must answer for a nil value too.
type PortNamer interface {
	PortName() proxy.ServicePortName
}

// portEntry is one entry of a PortMap.
type portEntry[V any] struct {
	hash uint64
	v    V
}

// shard is the entries whose hash falls in one shard, sorted by hash: a
// sorted slice of the exact size rather than a Go map, which at 40 entries
// holds 64 slots and their control words.
type shard[V any] struct {
	entries []portEntry[V]
	// names holds each entry's name, in the order of entries; nil while
	// every value is a PortNamer of its entry's name.
	names []proxy.ServicePortName
}

// nameAt returns the name of entry i.
func (s *shard[V]) nameAt(i int) proxy.ServicePortName {
	if s.names != nil {
		return s.names[i]
	}
	return any(s.entries[i].v).(PortNamer).PortName()
}

// namedBy reports whether v is a PortNamer of name, which then need not be
// stored.
func namedBy[V any](v V, name proxy.ServicePortName) bool {
	n, ok := any(v).(PortNamer)
	return ok && n.PortName() == name
}

type shardArray[V any] [shardCount]*shard[V]

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

func hashOf(name proxy.ServicePortName) uint64 {
	return maphash.Comparable(shardSeed, name)
}

// search returns where name (of hash h) is in s, or would be inserted:
// entries are sorted by hash alone, and the few that share one are told
// apart by name.
func (s *shard[V]) search(h uint64, name proxy.ServicePortName) (int, bool) {
	if s == nil {
		return 0, false
	}
	i, _ := slices.BinarySearchFunc(s.entries, h, func(e portEntry[V], h uint64) int { return cmp.Compare(e.hash, h) })
	for ; i < len(s.entries) && s.entries[i].hash == h; i++ {
		if s.nameAt(i) == name {
			return i, true
		}
	}
	return i, false
}

// Get returns the value for name and whether it is present.
func (m PortMap[V]) Get(name proxy.ServicePortName) (V, bool) {
	if m.shards != nil {
		h := hashOf(name)
		s := m.shards[h%shardCount]
		if i, ok := s.search(h, name); ok {
			return s.entries[i].v, true
		}
	}
	var zero V
	return zero, false
}

// Len returns the number of entries.
func (m PortMap[V]) Len() int { return m.n }

// All iterates over every entry, in no particular order.
func (m PortMap[V]) All() iter.Seq2[proxy.ServicePortName, V] {
	return func(yield func(proxy.ServicePortName, V) bool) {
		if m.shards == nil {
			return
		}
		for _, s := range m.shards {
			if s == nil {
				continue
			}
			for i := range s.entries {
				if !yield(s.nameAt(i), s.entries[i].v) {
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
func (e *PortMapEditor[V]) shard(i uint64) *shard[V] {
	if e.shards == nil {
		e.shards = new(shardArray[V])
		if e.base.shards != nil {
			*e.shards = *e.base.shards
		}
	}
	if !e.owned[i] {
		clone := &shard[V]{}
		if old := e.shards[i]; old != nil {
			clone.entries, clone.names = exactCopy(old.entries), exactCopy(old.names)
		}
		e.shards[i] = clone
		e.owned[i] = true
	}
	return e.shards[i]
}

// current returns shard i as edited so far (nil when it has no entries).
func (e *PortMapEditor[V]) current(i uint64) *shard[V] {
	if e.shards != nil {
		return e.shards[i]
	}
	if e.base.shards != nil {
		return e.base.shards[i]
	}
	return nil
}

// Set maps name to v.
func (e *PortMapEditor[V]) Set(name proxy.ServicePortName, v V) {
	h := hashOf(name)
	s := e.shard(h % shardCount)
	i, found := s.search(h, name)
	if s.names == nil && !namedBy(v, name) {
		names := make([]proxy.ServicePortName, len(s.entries))
		for j := range s.entries {
			names[j] = s.nameAt(j)
		}
		s.names = names
	}
	if found {
		s.entries[i].v = v
		if s.names != nil {
			s.names[i] = name
		}
		return
	}
	s.entries = slices.Insert(s.entries, i, portEntry[V]{hash: h, v: v})
	if s.names != nil {
		s.names = slices.Insert(s.names, i, name)
	}
	e.n++
}

// Remove deletes name, if present.
func (e *PortMapEditor[V]) Remove(name proxy.ServicePortName) {
	h := hashOf(name)
	if _, found := e.current(h%shardCount).search(h, name); !found {
		return
	}
	s := e.shard(h % shardCount)
	i, _ := s.search(h, name)
	s.entries = slices.Delete(s.entries, i, i+1)
	if s.names != nil {
		s.names = slices.Delete(s.names, i, i+1)
	}
	e.n--
}

// Done returns the edited map. The editor must not be used afterwards.
func (e *PortMapEditor[V]) Done() PortMap[V] {
	if e.shards == nil {
		return PortMap[V]{shards: e.base.shards, n: e.n}
	}
	for i, s := range e.shards {
		if !e.owned[i] {
			continue
		}
		if len(s.entries) == 0 {
			e.shards[i] = nil
			continue
		}
		// Appends leave room to grow; a published shard never grows.
		if cap(s.entries) > len(s.entries) {
			s.entries = exactCopy(s.entries)
		}
		if cap(s.names) > len(s.names) {
			s.names = exactCopy(s.names)
		}
	}
	return PortMap[V]{shards: e.shards, n: e.n}
}

// exactCopy returns a copy of s whose capacity is its length; nil for nil.
func exactCopy[E any](s []E) []E {
	if s == nil {
		return nil
	}
	out := make([]E, len(s))
	copy(out, s)
	return out
}
