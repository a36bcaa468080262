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
	sink := storeSink{s, map[*elemEntry][]string{}}
	err := k.ReadBack(ctx, sink)
	sink.finish()
	if err != nil {
		s.tablePresent = false
		s.chains, s.sets, s.elems = map[string]*chainEntry{}, map[string]*setEntry{}, map[string]*entryIndex{}
	}
	return err
}

// storeSink is the store as a knft.Sink. Endpoint-map elements are
// gathered into their frontend's slot group: slots holds each group's
// values until finish joins them (elements come in any order).
type storeSink struct {
	s     *store
	slots map[*elemEntry][]string
}

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
	// Only endpoint maps have a size, and their entries are slot groups,
	// one per frontend and N elements: their entry maps grow as the groups
	// come (a hint from the size, which counts elements, over-provisioned
	// them up to N-fold).
	return true
}

func (k storeSink) Elements(set string, kv []string) {
	slots, slotted := endpointMapSlots(set)
	hairpin := strings.HasPrefix(set, setHairpin)
	for i := 0; i+1 < len(kv); i += 2 {
		if slotted {
			// A slot the map's numgen never picks is no endpoint:
			// an element of its own (deleted), so that no group holds
			// more slots than the map's count (epMapOutgrown).
			if frontend, slot, ok := splitSlotKey(kv[i]); ok && slot < slots {
				k.slot(set, frontend, slot, kv[i+1])
				continue
			}
		}
		key := kv[i]
		if hairpin {
			key = hairpinStoreKey(key)
		}
		k.s.elem(set, key, true).setKernel(kv[i+1])
	}
}

// slot records the value of one slot of a frontend's group.
func (k storeSink) slot(set, frontend string, slot int, value string) {
	e := k.s.elem(set, frontend, true)
	e.flag(entrySlots|entryPresent, true)
	vs := k.slots[e]
	if slot >= len(vs) {
		vs = append(vs, make([]string, slot+1-len(vs))...)
	}
	vs[slot] = value
	k.slots[e] = vs
}

// finish gives each slot group read back its kernel value, and shrinks
// the entry indexes, which grew as the elements came (to as little as 3/8
// full: ≈ 1 MB at 10k × 10).
func (k storeSink) finish() {
	for e, vs := range k.slots {
		e.setKernel(strings.Join(vs, slotSep))
	}
	clear(k.slots)
	for _, m := range k.s.elems {
		m.compact()
	}
}
