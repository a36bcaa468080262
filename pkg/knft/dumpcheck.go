package knft

import (
	"hash/maphash"
	"slices"
	"sync"
)

// A set's element dump is not a snapshot. The kernel answers it in reply
// messages and resumes each by walking the set from its start again,
// skipping as many elements as it has sent. A hash set's table may be
// resized between two messages (the kernel grows it in deferred work after
// a large insert), which reorders the walk without a new ruleset
// generation, so nothing marks the dump interrupted: the listing then
// holds some elements twice and misses others. Every part's walk visits
// every element, so the dump lists at least as many elements as the set
// holds, and a missed element always comes with a repeated one: a set
// listed with no key twice is complete.

// maxDumpAttempts bounds the dumps of one set that list a key twice
// before the read-back fails: a resize is over by the next dump, so only
// a set that keeps changing (or growing) while it is listed runs out.
const maxDumpAttempts = 4

// keySeen tells whether a dump listed a key twice, by 64-bit hashes of
// its keys, sorted once the dump has ended: no copy of a key, 8 bytes per
// element, and the slice keeps its room from set to set (and from one
// read-back to the next through keySeens, until a garbage collection).
// Two keys of one hash look like a repeat and only cost a dump again, with
// another seed.
type keySeen struct {
	seed   maphash.Seed
	hashes []uint64
}

var keySeens = sync.Pool{New: func() any { return new(keySeen) }}

// reset forgets every key, for a new dump.
func (k *keySeen) reset() {
	k.seed = maphash.MakeSeed()
	k.hashes = k.hashes[:0]
}

// add records a key of the dump.
func (k *keySeen) add(key []byte) { k.hashes = append(k.hashes, maphash.Bytes(k.seed, key)) }

// repeated reports whether a key was added twice since reset.
func (k *keySeen) repeated() bool {
	slices.Sort(k.hashes)
	for i := 1; i < len(k.hashes); i++ {
		if k.hashes[i] == k.hashes[i-1] {
			return true
		}
	}
	return false
}
