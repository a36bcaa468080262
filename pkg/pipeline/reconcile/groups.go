package reconcile

import "iter"

// The groups of a Table whose Kind has a Group function: the keys of one
// kernel container (an nftables set or map, whose keys are a set's number
// and an element's key) that a backend walks on their own, in time
// proportional to the group's keys rather than the table's, when it
// deletes the container (DropKernelGroup), re-creates and re-fills it
// (GroupKeys), sizes it (GroupLen) or reads it back again
// (ForgetKernelGroup).
//
// Each group is a doubly linked list of the positions of its entries: a
// head per group (its first position and its number of entries) in a Go
// map, and each position's links in chunks parallel to the entries, which
// only a grouped table allocates. An entry joins its group when it is
// added and leaves it when it is removed, so a group's record goes with
// its last entry: under churn of containers the map holds the live
// groups, not every group there ever was (its room is that of the most
// groups live at once, as a Go map does not shrink). A list costs no allocation per
// group and no room beyond its keys, where a slice per group would (its
// header in the map, and the room append leaves); and the links are kept
// beside the entries rather than in them, so that a table without groups
// pays nothing for them, whatever the padding of its entries.

// groups are a grouped table's lists; a table without groups has none,
// and holds only a nil pointer for them.
type groups struct {
	heads map[uint32]groupHead
	links chunked[link]
}

// groupHead is one group's list: its first position and its length.
type groupHead struct {
	first, n int32
}

// link is a position's neighbours in its group's list, -1 at an end.
type link struct {
	prev, next int32
}

// grouped reports whether t keeps groups.
func (t *Table[O, K, V]) grouped() bool { return t.groups != nil }

// join adds the entry at pos, just added for k, to its group.
func (t *Table[O, K, V]) join(pos int32, k K) {
	g := t.kind.Group(k)
	h := t.groups.heads[g]
	l := link{prev: -1, next: -1}
	if h.n > 0 {
		l.next = h.first
		t.groups.links.at(h.first).prev = pos
	}
	if pos == int32(t.groups.links.n) {
		t.groups.links.add(l)
	} else {
		*t.groups.links.at(pos) = l
	}
	t.groups.heads[g] = groupHead{first: pos, n: h.n + 1}
}

// leave takes the entry at pos, about to be removed, out of its group,
// and drops the group's record with its last entry.
func (t *Table[O, K, V]) leave(pos int32, k K) {
	g := t.kind.Group(k)
	h := t.groups.heads[g]
	l := *t.groups.links.at(pos)
	if l.prev >= 0 {
		t.groups.links.at(l.prev).next = l.next
	} else {
		h.first = l.next
	}
	if l.next >= 0 {
		t.groups.links.at(l.next).prev = l.prev
	}
	if h.n--; h.n == 0 {
		delete(t.groups.heads, g)
		return
	}
	t.groups.heads[g] = h
}

// members yields the position of each entry of group g. The entry yielded
// may be removed before the next is asked for; no other may.
func (t *Table[O, K, V]) members(g uint32) iter.Seq[int32] {
	return func(yield func(int32) bool) {
		if !t.grouped() {
			return
		}
		h, ok := t.groups.heads[g]
		if !ok {
			return
		}
		for pos, n := h.first, h.n; n > 0; n-- {
			next := t.groups.links.at(pos).next
			if !yield(pos) {
				return
			}
			pos = next
		}
	}
}

// GroupLen is the number of keys of group g that are claimed or held by
// the kernel: what GroupKeys yields, the number of elements a re-filled
// container holds. A key that is only dirty (its last claim dropped and
// the kernel not holding it, until the next diff removes it) is not
// counted. It takes time proportional to the keys of g the table holds;
// 0 for a table without groups.
func (t *Table[O, K, V]) GroupLen(g uint32) int {
	n := 0
	for pos := range t.members(g) {
		if t.entries.at(pos).flags&(flagClaimed|flagKernel) != 0 {
			n++
		}
	}
	return n
}

// GroupBound is a bound on GroupLen in no time: the number of entries of
// group g, which counts also the keys only dirty (their last claim
// dropped, until the next diff removes them).
func (t *Table[O, K, V]) GroupBound(g uint32) int {
	if !t.grouped() {
		return 0
	}
	return int(t.groups.heads[g].n)
}

// GroupKeys yields every key of group g that is claimed or held by the
// kernel, in no particular order, not to be changed while ranging: what a
// backend writes (each claimed one with Want) when it re-creates the
// container of g whole. It takes time proportional to the keys of g the
// table holds; a table without groups yields nothing.
func (t *Table[O, K, V]) GroupKeys(g uint32) iter.Seq[K] {
	return func(yield func(K) bool) {
		for pos := range t.members(g) {
			e := t.entries.at(pos)
			if e.flags&(flagClaimed|flagKernel) != 0 && !yield(e.key) {
				return
			}
		}
	}
}

// KeyState is what a table holds of one key: the value its claims want
// (Want's) and whether any claim it, the kernel's value and whether the
// kernel holds it.
type KeyState[K comparable, V any] struct {
	Key    K
	Want   V
	Wanted bool
	Have   V
	Held   bool
}

// GroupStates yields the state of every key GroupKeys yields, without a
// lookup of each, not to be changed while ranging.
func (t *Table[O, K, V]) GroupStates(g uint32) iter.Seq[KeyState[K, V]] {
	return func(yield func(KeyState[K, V]) bool) {
		for pos := range t.members(g) {
			e := t.entries.at(pos)
			if e.flags&(flagClaimed|flagKernel) == 0 {
				continue
			}
			want, ok := t.want(pos, e)
			st := KeyState[K, V]{Key: e.key, Want: want, Wanted: ok, Have: e.have, Held: e.flags&flagKernel != 0}
			if !yield(st) {
				return
			}
		}
	}
}

// GroupInKernel reports whether the kernel holds any key of group g: when
// it does not (a cold start, a container just created), a backend need
// not look up what the kernel holds of the group's keys. It takes no time
// when the kernel holds no key of the table, and at most time
// proportional to the keys of g the table holds.
func (t *Table[O, K, V]) GroupInKernel(g uint32) bool {
	if t.inKernel == 0 {
		return false
	}
	for pos := range t.members(g) {
		if t.entries.at(pos).flags&flagKernel != 0 {
			return true
		}
	}
	return false
}

// DropKernelGroup records that the kernel holds no key of group g any
// more, as DropKernel does for each: the container of g was deleted, and
// its elements with it. A key neither claimed nor dirty goes; a claimed
// key is not made dirty, since the backend that deleted the container
// re-fills it or deletes its claims too.
func (t *Table[O, K, V]) DropKernelGroup(g uint32) {
	if t.inKernel == 0 {
		return
	}
	for pos := range t.members(g) {
		t.dropKernelAt(pos)
	}
}

// ForgetKernelGroup is ForgetKernel for the keys of group g: before the
// backend reads the container of g back again, what it recorded of it may
// no longer be true. The keys it forgets are dirty.
func (t *Table[O, K, V]) ForgetKernelGroup(g uint32) {
	if t.inKernel == 0 {
		return
	}
	for pos := range t.members(g) {
		t.forgetKernelAt(pos, t.entries.at(pos))
	}
}
