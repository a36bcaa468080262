package knft

import "hash/maphash"

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

// keySeen tells whether a key came before in the dump, by a 64-bit hash of
// its bytes: no copy of the key and no allocation per element (the map
// keeps its room from set to set). Two keys of one hash look like a
// repeat and only cost a dump again, with another seed.
type keySeen struct {
	seed maphash.Seed
	seen map[uint64]struct{}
}

func newKeySeen() *keySeen { return &keySeen{seen: map[uint64]struct{}{}} }

// reset forgets every key, for a new dump.
func (k *keySeen) reset() {
	k.seed = maphash.MakeSeed()
	clear(k.seen)
}

// repeated records key and reports whether it came before.
func (k *keySeen) repeated(key []byte) bool {
	h := maphash.Bytes(k.seed, key)
	if _, ok := k.seen[h]; ok {
		return true
	}
	k.seen[h] = struct{}{}
	return false
}
