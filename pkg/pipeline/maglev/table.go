// Package maglev builds Maglev lookup tables (Eisenbud et al., "Maglev: A
// Fast and Reliable Software Network Load Balancer", NSDI '16): a table of
// M slots, each naming a backend, such that every node that builds it from
// the same backends holds the same table, each backend holds M/N slots
// (rounded up or down), and removing one of N backends moves few flows of
// the others when M is much larger than N.
//
// It is pure and a leaf: it knows endpoints (proxy.Endpoint) and flows,
// nothing of Services or of any datapath. Which service ports use it is
// desired's decision (proxy.Balancing); the datapath that routes by a table
// renders one per dispatch from the State.
package maglev

import (
	"slices"

	"github.com/svcproxy/svcproxy/pkg/proxy"
)

// Factor is how many slots a table has at least per backend.
const Factor = 100

// A size is a table size and the most backends it serves. Sizes are
// primes, so that every skip in [1, M-1] walks all M slots, about a power
// of two apart, so that a table is at most about twice its need. Each
// serves at most M/Factor backends, and the small ones fewer: removing one
// backend moves more of the others' slots at mid-size N (tens to hundreds)
// than M/N alone suggests, so each size's limit is where that stays under
// 1 % (TestSizeLimits; docs/design/0007-maglev.md).
type size struct{ slots, backends int }

var sizes = [...]size{
	{16381, 16}, {32771, 48}, {65537, 192}, {131071, 1310},
	{262147, 2621}, {524287, 5242}, {1048573, 10485},
}

// MaxSize is the largest table size (4 MiB of 32-bit slots).
const MaxSize = 1048573

// MaxBackends is the most backends the largest table serves with the
// guarantees above.
const MaxBackends = 10485

// TableSize returns the size of the table for n backends: the smallest
// size that serves n. Past MaxBackends it returns MaxSize and false: the
// table still works and stays balanced, but a removal moves more flows of
// the others; past MaxSize backends, some backends get no slot at all.
//
// The size is a function of n alone, so that every node agrees on it
// without any history: a change of n across a size's limit changes the
// size, which moves nearly every flow (every node alike).
func TableSize(n int) (int, bool) {
	for _, s := range sizes {
		if n <= s.backends {
			return s.slots, true
		}
	}
	return MaxSize, false
}

// Table is a built lookup table.
type Table struct {
	// Backends are the distinct backends, sorted by address then port,
	// IPv4 addresses unmapped: the same whatever order they were given in.
	Backends []proxy.Endpoint
	// Slots maps each slot to its backend, as an index into Backends.
	Slots []uint32
}

// New builds the table of backends, sized by TableSize. Order and
// duplicates in backends do not matter; backends is not modified. With no
// backend the table is empty and Lookup finds nothing.
func New(backends []proxy.Endpoint) *Table {
	t := &Table{Backends: canonical(backends)}
	m, _ := TableSize(len(t.Backends))
	t.populate(m)
	return t
}

// Lookup returns the backend of the slot hash selects (FlowHash for a
// flow), and false when the table is empty.
func (t *Table) Lookup(hash uint32) (proxy.Endpoint, bool) {
	if len(t.Slots) == 0 {
		return proxy.Endpoint{}, false
	}
	return t.Backends[t.Slots[hash%uint32(len(t.Slots))]], true
}

// canonical returns a sorted copy of backends without duplicates, IPv4
// addresses unmapped, so that equal sets give equal tables.
func canonical(backends []proxy.Endpoint) []proxy.Endpoint {
	out := make([]proxy.Endpoint, len(backends))
	for i, ep := range backends {
		out[i] = proxy.Endpoint{IP: ep.IP.Unmap(), Port: ep.Port}
	}
	slices.SortFunc(out, proxy.Endpoint.Compare)
	return slices.Compact(out)
}

// populate fills m slots from t.Backends with the paper's loop: each
// backend walks its own permutation of the slots (offset, then steps of
// skip, both from hashes of its identity) and, taking turns in Backends'
// order, takes the next slot of its walk that nobody holds, until every
// slot is held. Turns make the shares differ by at most one slot.
func (t *Table) populate(m int) {
	n := len(t.Backends)
	if n == 0 {
		return
	}
	size := uint32(m)
	next := make([]uint32, n)
	skip := make([]uint32, n)
	for i, ep := range t.Backends {
		id := identity(ep)
		next[i] = jhash2(id[:], offsetSeed) % size
		skip[i] = jhash2(id[:], skipSeed)%(size-1) + 1
	}
	// A bitmap of held slots: the walks probe it at random, and at one bit
	// a slot it stays in the first-level cache where the slots do not.
	held := make([]uint64, (m+63)/64)
	slots := make([]uint32, m)
	for filled := 0; ; {
		for i := range n {
			c := next[i]
			for held[c/64]&(1<<(c%64)) != 0 {
				c = advance(c, skip[i], size)
			}
			held[c/64] |= 1 << (c % 64)
			slots[c] = uint32(i)
			next[i] = advance(c, skip[i], size)
			if filled++; filled == m {
				t.Slots = slots
				return
			}
		}
	}
}

// advance steps a walk by skip (< size) without a division.
func advance(c, skip, size uint32) uint32 {
	c += skip
	if c >= size {
		c -= size
	}
	return c
}
