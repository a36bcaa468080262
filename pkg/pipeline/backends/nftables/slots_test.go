package nftables

import (
	"github.com/svcproxy/svcproxy/pkg/pipeline/reconcile"
	"iter"
	"net/netip"
	"reflect"
	"slices"
	"strings"
	"testing"

	"sigs.k8s.io/knftables"

	"github.com/svcproxy/svcproxy/pkg/knft"
	"github.com/svcproxy/svcproxy/pkg/pipeline/desired"
	"github.com/svcproxy/svcproxy/pkg/proxy"
)

// TestRenderIsPure: render is a function of the State alone. A service
// port renders the same before and after the store holds a table whose
// endpoint slots are in another order (only assignSlots reads them), and
// assignSlots then keeps the kernel's slots.
func TestRenderIsPure(t *testing.T) {
	st := countsState(5)
	name := countsName("web")
	// The kernel gets the endpoints in reverse slot order: render of st
	// numbers them in State order, so every slot differs.
	reversed := withChange(st, name, func(sp *desired.ServicePort) {
		eps := slices.Clone(sp.Internal.Endpoints)
		slices.Reverse(eps)
		d := desired.Dispatch{Endpoints: eps}
		sp.Internal, sp.External, sp.Cluster = d, d, d
	})
	before := renderService(newConfig(st), st.Service(name))
	p := NewWithInterface(proxy.IPv4, fakeKernel(newStrictFake(knftables.IPv4Family)))
	mustSync(t, p, reversed)
	after := renderService(newConfig(st), st.Service(name))
	if !reflect.DeepEqual(before, after) {
		t.Fatalf("render of the same State differs once the store holds a table:\n%+v\n%+v", before.elems, after.elems)
	}
	kernel := renderService(newConfig(reversed), reversed.Service(name)).elems
	assigned := p.store.assignSlots(after).elems
	if len(assigned) != len(kernel) {
		t.Fatalf("assignSlots changed the element count: %d, want %d", len(assigned), len(kernel))
	}
	// Same elements as the kernel's (other elements, e.g. hairpin ones,
	// follow the endpoints' order, so compare sorted).
	spell := func(els []elemSpec) []string {
		var out []string
		for _, el := range els {
			out = append(out, el.set+" {"+el.key+" : "+el.value+"}")
		}
		slices.Sort(out)
		return out
	}
	if got, want := spell(assigned), spell(kernel); !slices.Equal(got, want) {
		t.Errorf("assigned slots differ from the kernel's:\n%v\nwant\n%v", got, want)
	}
	moved := 0
	for i := range assigned {
		if before.elems[i].value != assigned[i].value {
			moved++
		}
	}
	if moved == 0 {
		t.Fatal("no slot moved: the test's State does not exercise assignSlots")
	}
}

// TestAssignSlotsFillsFreeSlots: an endpoint the kernel has keeps its
// slot; new ones fill the free slots in render's order.
func TestAssignSlotsFillsFreeSlots(t *testing.T) {
	s := newStore()
	s.sets["m"] = &setEntry{present: true, isMap: true}
	s.setKernel(s.elemKeyOf("m", "fe", true), group("b|gone|a"))
	p := &part{elems: []elemSpec{{set: "m", key: "fe", value: group("a|b|c"), slots: true}}}
	if got := s.assignSlots(p).elems[0]; got.value != group("b|c|a") {
		t.Errorf("got %q, want %q", got.value, group("b|c|a"))
	}
}

// TestSlotGroupChanges: a slot group's diff is per element: only the
// slots whose value differs change, a slot the kernel lacks is added, one
// beyond the desired count deleted, and the kernel side is the desired
// value once committed.
func TestSlotGroupChanges(t *testing.T) {
	s := newStore()
	k := s.elemKeyOf("m", "fe", true)
	s.setKernel(k, group("a||c|x"))
	o := countsName("a")
	s.claimElems(ownerRef{&o}, []elemSpec{{set: "m", key: "fe", value: group("a|b|d"), slots: true}})
	var cs []mapElemChange
	var at reconcile.Pos
	s.mapElems.DiffFunc(func(c mapElemChange, p reconcile.Pos) { cs, at = append(cs, c), p })
	if len(cs) != 1 {
		t.Fatalf("%d changes of the group, want 1", len(cs))
	}
	var got []knft.Change
	mapChanges(s.mapElems.StateAt(at), func(c knft.Change) bool { got = append(got, c); return true })
	want := []knft.Change{
		{Key: slotElemKey("fe", 1), Value: "b", Add: true},
		{Key: slotElemKey("fe", 2), Value: "d", Del: true, Add: true},
		{Key: slotElemKey("fe", 3), Del: true},
	}
	if !slices.Equal(got, want) {
		t.Errorf("changes %+v, want %+v", got, want)
	}
	if n := mapChangeOps(cs[0]); n != 4 {
		t.Errorf("%d operations, want 4", n)
	}
	s.mapElems.CommitAt(at)
	if v, ok := s.kernel(k); v != group("a|b|d") || !ok {
		t.Errorf("kernel side %q present=%v after commit, want %q", v, ok, group("a|b|d"))
	}
}

// TestReadBackGroupsSlots: read-back gathers an endpoint map's elements,
// in any order, into their frontend's slot group; a key that is no
// frontend · slot, or whose slot the map's numgen never picks (≥ its
// endpoint count), stays an element of its own.
func TestReadBackGroupsSlots(t *testing.T) {
	s := newStore()
	sink := newStoreSink(s, proxy.IPv4)
	const m = "internal-endpoints-3-s0"
	sink.Set(knft.SetInfo{Name: m, IsMap: true, Size: 64})
	readElements(sink, m, slotElemKey("fe", 2), "c", slotElemKey("fe", 0), "a", "odd", "v", "", "catch-all")
	readElements(sink, m, slotElemKey("fe", 99999999), "z", slotElemKey("fe", 3), "y", slotElemKey("fe", -1), "w", "fe1x", "x")
	sink.SetListed(m)
	if v, ok := s.kernel(s.elemKeyOf(m, "fe", true)); !ok || v != group("a||c") {
		t.Errorf("slot group %q (present %v), want slots a, -, c", v, ok)
	}
	for _, key := range []string{"odd", "", slotElemKey("fe", 99999999), slotElemKey("fe", 3), slotElemKey("fe", -1), "fe1x"} {
		if _, ok := s.kernel(s.elemKeyOf(m, key, false)); !ok {
			t.Errorf("%q not read back as a plain element", key)
		}
	}
	if n := s.elemCount(m); n != 9 {
		t.Errorf("elemCount %d, want 9", n)
	}
}

// TestReadBackListedAgain: a set listed again (knft lists a set it could
// not decode through nft) forgets what its first listing reported, slot
// groups pending included; a group gets its value when its set's listing
// ends, whatever other sets are still being listed.
func TestReadBackListedAgain(t *testing.T) {
	s := newStore()
	sink := newStoreSink(s, proxy.IPv4)
	const m, other = "internal-endpoints-2-s0", "internal-endpoints-2-s1"
	sink.Set(knft.SetInfo{Name: m, IsMap: true, Size: 64})
	sink.Set(knft.SetInfo{Name: other, IsMap: true, Size: 64})
	readElements(sink, m, slotElemKey("fe", 0), "stale", slotElemKey("gone", 1), "x")
	readElements(sink, other, slotElemKey("fo", 1), "b")
	sink.Set(knft.SetInfo{Name: m, IsMap: true, Size: 64})
	readElements(sink, m, slotElemKey("fe", 1), "b")
	readElements(sink, other, slotElemKey("fo", 0), "a")
	sink.SetListed(m)
	if v, ok := s.kernel(s.elemKeyOf(m, "fe", true)); !ok || v != group("|b") {
		t.Errorf("group of the second listing %q (present %v), want slots -, b", v, ok)
	}
	if v, ok := s.kernel(s.elemKeyOf(m, "gone", true)); ok {
		t.Errorf("a group of the forgotten listing is kept: %q", v)
	}
	if v, ok := s.kernel(s.elemKeyOf(other, "fo", true)); ok {
		t.Errorf("group of a set still listed %q, want none until its listing ends", v)
	}
	sink.SetListed(other)
	if v, _ := s.kernel(s.elemKeyOf(other, "fo", true)); v != group("a|b") {
		t.Errorf("group %q once its set is listed, want a|b", v)
	}
}

// group is the slot group's value of the slots' values spelled joined
// with "|" ("": a slot without one).
func group(slots string) string { return joinSlots(strings.Split(slots, "|")) }

// readElements reports key, value pairs of set to sink as knft does: from
// a buffer it reuses.
func readElements(sink *storeSink, set string, kv ...string) {
	var buf []byte
	for i := 0; i+1 < len(kv); i += 2 {
		buf = append(append(buf[:0], kv[i]...), kv[i+1]...)
		sink.Element(set, buf[:len(kv[i])], buf[len(kv[i]):])
		clear(buf) // what the sink kept must not alias it
	}
}

// kernelElems calls f with every element of set the kernel holds, slot
// groups as the kernel's elements, each key and value as the store keeps
// them (asData: data in the sets whose keys are data) or spelled.
func (s *store) kernelElems(set string, asData bool, f func(key, value string)) {
	for k, v := range s.kernelEntries(set) {
		switch {
		case k.slots && asData:
			eachSlot(v, func(slot int, v string) { f(slotElemKey(k.key, slot), v) })
		case k.slots:
			l := unitLayout(set, s.desiredSet(set), "")
			eachSlot(v, func(slot int, v string) { f(spellSlot(l, k.key, slot, v)) })
		case asData:
			f(k.key, v)
		default:
			f(spellKey(set, k.key), v)
		}
	}
}

// kernelEntries yields each element and slot group of set the kernel
// holds, with its value.
func (s *store) kernelEntries(set string) iter.Seq2[elemKey, string] {
	return func(yield func(elemKey, string) bool) {
		for k := range s.groupKeys(set) {
			if v, ok := s.kernel(k); ok && !yield(k, v) {
				return
			}
		}
	}
}

// elemSets is the names of the sets the store holds elements of, sorted.
func (s *store) elemSets() []string {
	var out []string
	for name := range s.setIDs {
		if s.groupLen(name) > 0 {
			out = append(out, name)
		}
	}
	slices.Sort(out)
	return out
}

// TestHairpinKeys: a hairpin element is keyed by its data (the two
// addresses' bytes), spelled back as nft spells it; the read-back asks
// for the hairpin sets' elements as data in the family's layout, and
// keeps their keys as they come (an element that is no a . a too: it is
// deleted), the endpoint maps' as data too (epMapLayout), the other
// sets' spelled.
func TestHairpinKeys(t *testing.T) {
	set := hairpinSets[0]
	for _, a := range []string{"10.0.0.1", "::ffff:10.0.0.1", "fd00::1", "2001:db8::a:b"} {
		addr := netip.MustParseAddr(a)
		key := string(appendHairpinKey(nil, addr))
		spelled := addr.Unmap().String() + " . " + addr.Unmap().String()
		if len(key) != 2*addr.Unmap().BitLen()/8 {
			t.Errorf("%s: key of %d bytes", a, len(key))
		}
		if got := spellKey(set, key); got != spelled {
			t.Errorf("%s: spelled %q, want %q", a, got, spelled)
		}
	}
	for fam, want := range map[proxy.IPFamily]*knft.Layout{proxy.IPv4: dataLayouts[set][0], proxy.IPv6: dataLayouts[set][1]} {
		s := newStore()
		sink := newStoreSink(s, fam)
		if list, as := sink.Set(knft.SetInfo{Name: set}); !list || as != want {
			t.Errorf("%s: hairpin set listed %v as %p, want as %p", fam, list, as, want)
		}
		if list, as := sink.Set(knft.SetInfo{Name: "internal-endpoints-10-s0"}); !list || as == nil || as != epMapLayout("internal-endpoints-10-s0", fam) {
			t.Errorf("%s: %s listed %v as %p, want as data", fam, "internal-endpoints-10-s0", list, as)
		}
		if list, as := sink.Set(knft.SetInfo{Name: "no-endpoint-services"}); !list || as != nil {
			t.Errorf("%s: %s listed %v as %p, want spelled", fam, "no-endpoint-services", list, as)
		}
		other := append(netip.MustParseAddr("fd00::1").AsSlice(), netip.MustParseAddr("fd00::2").AsSlice()...)
		readElements(sink, set, string(other), "")
		sink.SetListed(set)
		if _, ok := s.kernel(s.elemKeyOf(set, string(other), false)); !ok {
			t.Errorf("%s: element %x not read back, want it kept as it came", fam, other)
		}
	}
}

// want is the value key should have ("" for a set element), and whether
// anyone claims it.
func (s *store) want(k elemKey) (string, bool) {
	if v, ok := s.mapElems.Want(k); ok {
		return v, true
	}
	return "", s.setElems.Claimed(k)
}

// groupKeys yields every key of set that is claimed or in the kernel, of
// both tables, in no particular order.
func (s *store) groupKeys(set string) func(yield func(elemKey) bool) {
	return func(yield func(elemKey) bool) {
		for st := range s.groupStates(set) {
			if !yield(st.key) {
				return
			}
		}
	}
}

// groupLen is the number of keys of set that are claimed or in the kernel.
func (s *store) groupLen(set string) int {
	g, ok := s.groupOf(set)
	if !ok {
		return 0
	}
	return s.setElems.GroupLen(g) + s.mapElems.GroupLen(g)
}
