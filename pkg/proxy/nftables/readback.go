package nftables

import (
	"context"
	"strings"

	"github.com/svcproxy/svcproxy/pkg/knft"
)

// readBack fills the kernel side of the store from the existing table,
// once, when a new process starts: an unchanged table then diffs to
// nothing and nothing is flushed or rewritten, and whatever differs (an
// element deleted behind our back) is repaired piecemeal. Affinity sets
// are filled by the kernel and their elements are not ours to diff, so
// they are not listed. On failure the kernel side is forgotten, so a retry
// starts clean.
func (s *store) readBack(ctx context.Context, k knft.Interface) error {
	err := k.ReadBack(ctx, storeSink{s})
	if err != nil {
		s.tablePresent = false
		s.chains, s.sets, s.elems = map[string]*chainEntry{}, map[string]*setEntry{}, map[string]map[string]*elemEntry{}
	}
	return err
}

// storeSink is the store as a knft.Sink.
type storeSink struct{ s *store }

func (k storeSink) Table() { k.s.tablePresent = true }

func (k storeSink) Chain(name string) { k.chain(name) }

func (k storeSink) chain(name string) *chainEntry {
	e := k.s.chains[name]
	if e == nil {
		e = &chainEntry{present: true}
		k.s.chains[name] = e
	}
	return e
}

func (k storeSink) Rule(chain, comment string) {
	e := k.chain(chain)
	e.kernel = append(e.kernel, comment)
}

func (k storeSink) Set(name string, isMap bool, size uint64) bool {
	k.s.sets[name] = &setEntry{present: true, isMap: isMap, size: size}
	delete(k.s.elems, name)
	if strings.HasPrefix(name, affinityPrefix) {
		return false
	}
	if size > 0 {
		// Sized by this code to the power of two at least twice what it
		// held (epMapSize), so it holds more than size/4 elements (unless
		// at the minimum size): a hint of that never over-provisions. A
		// hint of size/2 did, by up to 2×: Go rounds a map's tables up to
		// a power of two, and 12.5k elements got 32k slots instead of 16k
		// (at 10k×10, 18 of the restart's 66 MB live heap). Capped in
		// case someone else's is huge.
		k.s.elems[name] = make(map[string]*elemEntry, min(size/4, 1<<17))
	}
	return true
}

func (k storeSink) Elements(set string, kv []string) {
	for i := 0; i+1 < len(kv); i += 2 {
		e := k.s.elem(set, kv[i], true)
		e.present, e.kernel = true, kv[i+1]
	}
}
