package nftables

import (
	"reflect"
	"slices"
	"testing"

	"sigs.k8s.io/knftables"

	"github.com/svcproxy/svcproxy/pkg/proxy"
	"github.com/svcproxy/svcproxy/pkg/proxy/desired"
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
	for key, value := range map[string]string{"fe . 0": "b", "fe . 1": "gone", "fe . 2": "a"} {
		e := s.elem("m", key, true)
		e.present, e.kernel = true, value
	}
	p := &part{}
	p.slotGroups = []slotGroup{{start: 0, n: 3, frontend: "fe"}}
	for i, v := range []string{"a", "b", "c"} {
		p.addElem("m", slotKey("fe", i), v)
	}
	var got []string
	for _, el := range s.assignSlots(p).elems {
		got = append(got, el.key+" : "+el.value)
	}
	if want := []string{"fe . 0 : b", "fe . 1 : c", "fe . 2 : a"}; !slices.Equal(got, want) {
		t.Errorf("got %v, want %v", got, want)
	}
}
