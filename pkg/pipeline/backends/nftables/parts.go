package nftables

import "github.com/svcproxy/svcproxy/pkg/pipeline/reconcile"

// parts holds each owner's part, so that its claims can be released: the
// parts in a slice, found by their owner through an index of positions
// (which keeps no second copy of the owner's name).
type parts struct {
	byPos []*part // nil at a free position
	free  []int32
	index reconcile.Index[owner]
}

func newParts() *parts { return &parts{index: reconcile.NewIndex[owner](nil)} }

// ownerAt is the owner of the part at pos: the key of its cell.
func (ps *parts) ownerAt(pos int32) owner { return *ps.byPos[pos].owner }

// get returns o's part, or nil.
func (ps *parts) get(o owner) *part {
	if pos, ok := ps.index.Find(o, ps.ownerAt); ok {
		return ps.byPos[pos]
	}
	return nil
}

// add holds p, whose owner holds no part.
func (ps *parts) add(p *part) {
	pos := int32(len(ps.byPos))
	if n := len(ps.free); n > 0 {
		pos, ps.free = ps.free[n-1], ps.free[:n-1]
	} else {
		ps.byPos = append(ps.byPos, nil)
	}
	ps.byPos[pos] = p
	ps.index.Add(*p.owner, pos, ps.ownerAt)
}

// remove drops o's part, which it holds.
func (ps *parts) remove(o owner) {
	pos := ps.index.Remove(o, ps.ownerAt)
	ps.byPos[pos] = nil
	ps.free = append(ps.free, pos)
}

// clear drops every part, keeping the room.
func (ps *parts) clear() {
	clear(ps.byPos)
	ps.byPos, ps.free = ps.byPos[:0], ps.free[:0]
	ps.index.Clear()
}

// reserve makes room for n parts in an empty set of parts.
func (ps *parts) reserve(n int) {
	if ps.index.Len() == 0 && n > cap(ps.byPos) {
		ps.byPos = make([]*part, 0, n)
		ps.index.Reset(n)
	}
}
