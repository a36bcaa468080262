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

// Factor is how many slots a table has at least per backend: it bounds how
// many flows of other backends move when one backend goes (see
// docs/design/0007-maglev.md).
const Factor = 100

// sizes are the table sizes, ascending: the smallest prime at or above
// Factor·2^k. Primes, so that every skip in [1, M-1] walks all M slots.
// Doubling steps keep a table at most about twice its minimum.
var sizes = [...]int{101, 211, 401, 809, 1601, 3203, 6421, 12809, 25601, 51203, 102407, 204803, 409609, 819229}

// MaxSize is the largest table size; it holds Factor slots for up to
// MaxBackends backends.
const MaxSize = 819229

// MaxBackends is the largest backend count whose table keeps Factor slots
// per backend.
const MaxBackends = MaxSize / Factor

// TableSize returns the size of the table for n backends: the smallest of
// the sizes at or above Factor·n. Past MaxBackends it returns MaxSize and
// false: the table still works, but holds fewer than Factor slots per
// backend, so a removal moves more flows of the others; past MaxSize
// backends, some backends get no slot at all.
func TableSize(n int) (int, bool) {
	for _, m := range sizes {
		if m >= Factor*n {
			return m, true
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
