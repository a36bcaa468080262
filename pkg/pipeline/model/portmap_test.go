package model

import (
	"fmt"
	"maps"
	"testing"

	"github.com/svcproxy/svcproxy/pkg/proxy"
)

func portName(i int) proxy.ServicePortName {
	return proxy.ServicePortName{
		ServiceName: proxy.ServiceName{Namespace: "ns", Name: fmt.Sprintf("svc-%d", i)},
		Port:        "p", Protocol: proxy.TCP,
	}
}

func collect[V any](m PortMap[V]) map[proxy.ServicePortName]V {
	out := map[proxy.ServicePortName]V{}
	for k, v := range m.All() {
		out[k] = v
	}
	return out
}

func TestPortMapZeroValueIsEmpty(t *testing.T) {
	var m PortMap[int]
	if _, ok := m.Get(portName(1)); ok || m.Len() != 0 || len(collect(m)) != 0 {
		t.Fatalf("zero PortMap is not empty")
	}
}

func TestPortMapEditsLeaveBaseUntouched(t *testing.T) {
	want := map[proxy.ServicePortName]int{}
	for i := range 1000 {
		want[portName(i)] = i
	}
	base := NewPortMap(want)
	if base.Len() != 1000 || !maps.Equal(collect(base), want) {
		t.Fatalf("NewPortMap: got %d entries, want 1000 equal entries", base.Len())
	}

	e := NewPortMapEditor(base)
	e.Set(portName(1), -1)   // replace
	e.Set(portName(5000), 5) // add
	e.Remove(portName(2))    // delete
	e.Remove(portName(9999)) // delete of an absent key is a no-op
	edited := e.Done()

	if !maps.Equal(collect(base), want) {
		t.Fatalf("editing changed the base map")
	}
	wantEdited := maps.Clone(want)
	wantEdited[portName(1)] = -1
	wantEdited[portName(5000)] = 5
	delete(wantEdited, portName(2))
	if got := collect(edited); !maps.Equal(got, wantEdited) || edited.Len() != len(wantEdited) {
		t.Fatalf("edited map: len %d, want %d; equal=%v", edited.Len(), len(wantEdited), maps.Equal(got, wantEdited))
	}
	if v, ok := edited.Get(portName(1)); !ok || v != -1 {
		t.Fatalf("Get after replace = %d, %v", v, ok)
	}
}

func TestPortMapEditorWithoutWritesSharesBase(t *testing.T) {
	base := NewPortMap(map[proxy.ServicePortName]int{portName(1): 1})
	e := NewPortMapEditor(base)
	e.Remove(portName(2))
	if got := e.Done(); got.shards != base.shards || got.Len() != 1 {
		t.Fatalf("an editor without writes must return the base unchanged")
	}
}

func TestPortMapAllStopsEarly(t *testing.T) {
	m := NewPortMap(map[proxy.ServicePortName]int{portName(1): 1, portName(2): 2, portName(3): 3})
	n := 0
	for range m.All() {
		n++
		break
	}
	if n != 1 {
		t.Fatalf("All did not stop when asked: %d iterations", n)
	}
}

func TestPortMapWithWithoutKeys(t *testing.T) {
	base := NewPortMap(map[proxy.ServicePortName]int{portName(1): 1, portName(2): 2})
	added := base.With(portName(3), 3)
	removed := added.Without(portName(1))
	if !maps.Equal(collect(base), map[proxy.ServicePortName]int{portName(1): 1, portName(2): 2}) {
		t.Fatalf("With or Without changed the map they were called on: %v", collect(base))
	}
	if !maps.Equal(collect(added), map[proxy.ServicePortName]int{portName(1): 1, portName(2): 2, portName(3): 3}) {
		t.Fatalf("With: %v", collect(added))
	}
	want := map[proxy.ServicePortName]int{portName(2): 2, portName(3): 3}
	if !maps.Equal(collect(removed), want) || removed.Len() != 2 {
		t.Fatalf("Without: %v (len %d)", collect(removed), removed.Len())
	}
	keys := maps.Collect(func(yield func(proxy.ServicePortName, int) bool) {
		for k := range removed.Keys() {
			if !yield(k, want[k]) {
				return
			}
		}
	})
	if !maps.Equal(keys, want) {
		t.Fatalf("Keys listed %v, want the names of %v", keys, want)
	}
}

// A published shard is exactly as long as its entries: appends while
// editing leave room to grow, which Done gives back, and a shard emptied by
// an edit is dropped.
func TestPortMapShardsHoldNoSpareRoom(t *testing.T) {
	var e PortMapEditor[int]
	for i := range 5000 {
		e.Set(portName(i), i)
	}
	m := e.Done()
	for i, s := range m.shards {
		if s != nil && cap(s.entries) != len(s.entries) {
			t.Fatalf("shard %d: %d entries, room for %d", i, len(s.entries), cap(s.entries))
		}
	}
	only := NewPortMap(map[proxy.ServicePortName]int{portName(1): 1})
	if empty := only.Without(portName(1)); empty.Len() != 0 || empty.shards[hashOf(portName(1))%shardCount] != nil {
		t.Fatalf("removing the only entry left %d entries or an empty shard", empty.Len())
	}
}

// Names whose hashes collide are told apart by name.
func TestPortMapShardSearchTiesOnName(t *testing.T) {
	s := &shard[int]{entries: []portEntry[int]{{hash: 7, v: 1}, {hash: 7, v: 2}}, names: []proxy.ServicePortName{portName(1), portName(2)}}
	for _, want := range []int{1, 2} {
		if i, ok := s.search(7, portName(want)); !ok || s.entries[i].v != want {
			t.Fatalf("search(%v) = %d, %v", portName(want), i, ok)
		}
	}
	if i, ok := s.search(7, portName(3)); ok || i != 2 {
		t.Fatalf("search of an absent name = %d, %v; want 2 (after the equal hashes), false", i, ok)
	}
}

// A map of ServicePorts under their own names stores no names. A value
// under another name, or nil, makes its shard store the names of all its
// entries, and every entry stays reachable.
func TestPortMapStoresNamesOnlyWhenValuesLackThem(t *testing.T) {
	ports := map[proxy.ServicePortName]*ServicePort{}
	for i := range 1000 {
		ports[portName(i)] = &ServicePort{Name: portName(i)}
	}
	m := NewPortMap(ports)
	for i, s := range m.shards {
		if s != nil && s.names != nil {
			t.Fatalf("shard %d stores names of self-named values", i)
		}
	}
	other, nilName := portName(5000), portName(5001)
	misnamed := &ServicePort{Name: portName(7)}
	e := NewPortMapEditor(m)
	e.Set(other, misnamed)
	e.Set(nilName, nil)
	edited := e.Done()
	for _, name := range []proxy.ServicePortName{other, nilName} {
		if s := edited.shards[hashOf(name)%shardCount]; s.names == nil {
			t.Fatalf("the shard of %v stores no names", name)
		}
	}
	ports[other], ports[nilName] = misnamed, nil
	if got := collect(edited); !maps.Equal(got, ports) || edited.Len() != len(ports) {
		t.Fatalf("edited map: %d entries (Len %d), want %d equal ones", len(got), edited.Len(), len(ports))
	}
	for name, want := range ports {
		if got, ok := edited.Get(name); !ok || got != want {
			t.Fatalf("Get(%v) = %v, %v; want %v", name, got, ok, want)
		}
	}
	if !maps.Equal(collect(m), func() map[proxy.ServicePortName]*ServicePort {
		delete(ports, other)
		delete(ports, nilName)
		return ports
	}()) {
		t.Fatalf("the edit changed the base map")
	}
}
