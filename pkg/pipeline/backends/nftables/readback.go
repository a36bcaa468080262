package nftables

import (
	"context"
	"encoding/binary"
	"slices"
	"strings"
	"unsafe"

	"github.com/svcproxy/svcproxy/pkg/knft"
	"github.com/svcproxy/svcproxy/pkg/proxy"
)

// readBack fills the kernel side of the store from the existing table,
// once, when a new process starts: an unchanged table then diffs to
// nothing and nothing is flushed or rewritten, and whatever differs (an
// element deleted behind our back) is repaired piecemeal. Affinity sets
// are filled by the kernel and their elements are not ours to diff, so
// they are not listed. On failure the kernel side is forgotten, so a retry
// starts clean.
func (s *store) readBack(ctx context.Context, k knft.Interface, family proxy.IPFamily) error {
	sink := newStoreSink(s, family)
	err := k.ReadBack(ctx, sink)
	sink.finish()
	if err != nil {
		s.tablePresent = false
		s.chains, s.sets = map[string]*chainEntry{}, map[string]*setEntry{}
		s.setElems, s.mapElems = newSetTable(), newMapTable()
	}
	return err
}

// storeSink is the store as a knft.Sink. It asks for the elements of the
// sets whose store keys are data (datakeys.go) as data, so they come
// in the form render makes and are compared as they are. It copies what
// the store keeps out of knft's buffer and nothing else: a key once, a
// value of a set without slot
// groups once per distinct value (a verdict map's ten thousand elements
// share a few dozen). An endpoint map's elements are gathered into their
// frontend's slot group (they come in any order), whose joined value is
// made when the map's listing ends: only the maps being listed (knft dumps
// four at a time) have groups pending, not every map of the table.
type storeSink struct {
	s       *store
	family  proxy.IPFamily
	listing map[string]*setListing
	last    *setListing       // the set of the last Element
	values  map[string]string // the distinct values read back
	scratch [][]byte          // a group's slot values, by slot (SetListed)
}

// setListing is a set whose elements are coming.
type setListing struct {
	name   string
	id     uint32             // the set's number (store.setID)
	slots  int                // an endpoint map's endpoint count; 0: no slot groups
	groups map[string]*[]byte // each frontend's slots so far (appendSlotRecord)
}

func newStoreSink(s *store, family proxy.IPFamily) *storeSink {
	return &storeSink{s: s, family: family, listing: map[string]*setListing{}, values: map[string]string{}}
}

func (k *storeSink) Table() { k.s.tablePresent = true }

func (k *storeSink) Chain(name string, hook *knft.ChainHook) { k.chain(name).hook = hook }

func (k *storeSink) chain(name string) *chainEntry {
	e := k.s.chains[name]
	if e == nil {
		e = &chainEntry{present: true}
		k.s.chains[name] = e
	}
	return e
}

func (k *storeSink) Rule(chain, comment string, refs []string) {
	e := k.chain(chain)
	e.kernel = append(e.kernel, comment)
	for _, r := range refs {
		if !slices.Contains(e.refs, r) {
			e.refs = append(e.refs, k.intern(r))
		}
	}
}

func (k *storeSink) Set(s knft.SetInfo) (bool, *knft.Layout) {
	k.s.sets[s.Name] = &setEntry{present: true, isMap: s.IsMap, size: s.Size, typ: s.Type}
	k.s.forgetKernelSet(s.Name)
	delete(k.listing, s.Name)
	k.last = nil
	if l := readLayout(s.Name, k.family); l != nil {
		// A set of another layout lists nothing: it is replaced as a
		// whole (typeDiffers).
		return true, l
	}
	return !strings.HasPrefix(s.Name, affinityPrefix), nil
}

// intern returns name, one string per distinct name: an upstream table has
// a rule per endpoint that names the same chain.
func (k *storeSink) intern(name string) string {
	v, ok := k.values[name]
	if !ok {
		k.values[name] = name
		return name
	}
	return v
}

func (k *storeSink) Element(set string, key, value []byte) {
	l := k.last
	if l == nil || l.name != set {
		l = k.listingOf(set)
	}
	// A slot the map's numgen never picks is no endpoint: an element of
	// its own (deleted), so that no group holds more slots than the map's
	// count (epMapOutgrown).
	if l.slots > 0 {
		if frontend, slot, ok := splitSlotKey(key); ok && slot < l.slots {
			l.addSlot(frontend, slot, value)
			return
		}
	}
	k.s.setKernel(elemKey{set: l.id, key: string(key)}, k.value(value))
}

// listingOf returns the listing of set, made at its first element.
func (k *storeSink) listingOf(set string) *setListing {
	l := k.listing[set]
	if l == nil {
		l = &setListing{name: set, id: k.s.setID(set)}
		if n, ok := endpointMapSlots(set); ok {
			l.slots, l.groups = n, map[string]*[]byte{}
		}
		k.listing[set] = l
	}
	k.last = l
	return l
}

// value is value as a string, one per distinct value.
func (k *storeSink) value(value []byte) string {
	if len(value) == 0 {
		return ""
	}
	v, ok := k.values[string(value)]
	if !ok {
		v = string(value)
		k.values[v] = v
	}
	return v
}

// SetListed gives each slot group of set its joined kernel value.
func (k *storeSink) SetListed(set string) {
	if l := k.listing[set]; l != nil {
		for frontend, records := range l.groups {
			k.s.setKernel(elemKey{set: l.id, slots: true, key: frontend}, k.join(*records))
		}
		delete(k.listing, set)
	}
	if k.last != nil && k.last.name == set {
		k.last = nil
	}
}

// finish completes the sets whose listing did not end (none, from knft).
func (k *storeSink) finish() {
	for set := range k.listing {
		k.SetListed(set)
	}
}

// addSlot records the value of one slot of frontend's group.
func (l *setListing) addSlot(frontend []byte, slot int, value []byte) {
	records := l.groups[string(frontend)]
	if records == nil {
		// Room for every slot, guessed from this one's size: the
		// values of one map are about as long.
		b := make([]byte, 0, min(l.slots*(len(value)+slotRecordHeader), 64<<10))
		records = &b
		l.groups[string(frontend)] = records
	}
	*records = appendSlotRecord(*records, slot, value)
}

// A group's slots, as they come, are records in one byte slice: the slot
// and the value's length as uvarints, then the value. Strings per slot
// and a slice of them per group (≈ 400 bytes a group of 10 instead of ≈
// 200) were most of a restart's peak heap at 10k × 10.
const slotRecordHeader = 3 // bytes before a value: a slot < 128 takes 1, a length < 16k at most 2

func appendSlotRecord(b []byte, slot int, value []byte) []byte {
	b = binary.AppendUvarint(b, uint64(slot))
	b = binary.AppendUvarint(b, uint64(len(value)))
	return append(b, value...)
}

// join is a group's records as its value (slots.go): the slots' values
// in slot order, each after its length, 0 for a slot not read back.
func (k *storeSink) join(records []byte) string {
	vals := k.scratch[:0]
	size := 0
	for len(records) > 0 {
		slot, n := binary.Uvarint(records)
		l, m := binary.Uvarint(records[n:])
		v := records[n+m : n+m+int(l)]
		records = records[n+m+int(l):]
		for len(vals) <= int(slot) {
			vals = append(vals, nil)
			size++
		}
		size += len(v) - len(vals[slot])
		vals[slot] = v
	}
	b := make([]byte, 0, size)
	for _, v := range vals {
		b = appendSlot(b, v)
	}
	clear(vals)
	k.scratch = vals[:0]
	return unsafe.String(unsafe.SliceData(b), len(b))
}
