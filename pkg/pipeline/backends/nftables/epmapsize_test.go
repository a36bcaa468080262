package nftables

import (
	"context"
	"fmt"
	"net/netip"
	"regexp"
	"strings"
	"testing"

	"sigs.k8s.io/knftables"

	"github.com/svcproxy/svcproxy/pkg/knft"
	"github.com/svcproxy/svcproxy/pkg/pipeline/desired"
	"github.com/svcproxy/svcproxy/pkg/proxy"
	"github.com/svcproxy/svcproxy/pkg/testing/netnstest"
	"github.com/svcproxy/svcproxy/pkg/testing/proxytest"
)

// grownTo is benchState(to) marked as a partial sync from benchState(from):
// the services it adds are the changes.
func grownTo(from, to int) *desired.State {
	small, big := benchState(from), benchState(to)
	big.Changed = map[proxy.ServicePortName]struct{}{}
	for name := range big.Services.All() {
		if small.Service(name) == nil {
			big.Changed[name] = struct{}{}
		}
	}
	return big
}

type mapFill struct{ size, count int }

// endpointMapFill is the size and element count of every endpoint map.
func endpointMapFill(f *strictFake) map[string]mapFill {
	out := map[string]mapFill{}
	for name, m := range f.Table.Maps {
		if !strings.Contains(name, "-endpoints-") {
			continue
		}
		fill := mapFill{count: len(m.Elements)}
		if m.Map.Size != nil {
			fill.size = int(*m.Map.Size)
		}
		out[name] = fill
	}
	return out
}

var sizeClause = regexp.MustCompile(` size \d+ ;`)

// TestEndpointMapsGrow: endpoint maps are created with room for twice
// their elements; a partial sync that adds more than fit re-creates the
// maps, bigger, with their chains and every element, in transactions that
// never take a map past its size (the strict fake refuses that, as the
// kernel does). The table then equals a cold sync's, sizes aside: a map
// that still fit keeps its size.
func TestEndpointMapsGrow(t *testing.T) {
	fake := newStrictFake(knftables.IPv4Family)
	p := NewWithInterface(proxy.IPv4, fakeKernel(fake))
	mustSync(t, p, benchState(20))
	before := endpointMapFill(fake)
	var sent strings.Builder // every transaction of the growing sync
	fake.afterRun = func() { sent.WriteString(fake.LastTransaction.String()) }
	mustSync(t, p, grownTo(20, 300))
	grown := 0
	for name, fill := range endpointMapFill(fake) {
		if fill.size < minEPMapSize || fill.size < fill.count {
			t.Errorf("%s: size %d for %d elements", name, fill.size, fill.count)
		}
		if b, ok := before[name]; ok && fill.size > b.size {
			grown++
			if !strings.Contains(sent.String(), "delete map ip kube-proxy "+name+"\n") &&
				!strings.Contains(sent.String(), "delete map ip kube-proxy "+name+" ") {
				t.Errorf("%s grew from %d to %d without being re-created", name, b.size, fill.size)
			}
		}
	}
	if grown == 0 {
		t.Fatalf("no endpoint map outgrew its size; before: %v", before)
	}
	cold := newStrictFake(knftables.IPv4Family)
	mustSync(t, NewWithInterface(proxy.IPv4, fakeKernel(cold)), benchState(300))
	want, got := sizeClause.ReplaceAllString(sortedDump(cold), ""), sizeClause.ReplaceAllString(sortedDump(fake), "")
	if want != got {
		t.Errorf("grown table differs from a cold sync's (- cold, + grown):\n%s", lineDiff(want, got))
	}
}

// TestEndpointMapsGrowInKernel: the same growth on the real kernel, which
// enforces sizes; then a restarted Proxier reads the sizes back and
// rewrites nothing.
func TestEndpointMapsGrowInKernel(t *testing.T) {
	requireRoot(t)
	ns, err := netnstest.New(t).NewNS("epsize")
	if err != nil {
		t.Fatal(err)
	}
	err = ns.Do(func() error {
		p, err := New(proxy.IPv4, Options{})
		if err != nil {
			return err
		}
		defer p.Close()
		defer func() { _ = p.Cleanup(context.Background()) }()
		if err := p.Sync(context.Background(), benchState(20), proxytest.ModeOf(benchState(20))); err != nil {
			return err
		}
		small := map[string]uint64{}
		for name, m := range p.store.sets {
			if m.desired.bound {
				small[name] = m.size
			}
		}
		if err := p.Sync(context.Background(), grownTo(20, 300), proxytest.ModeOf(grownTo(20, 300))); err != nil {
			return fmt.Errorf("growing: %w", err)
		}
		q, err := New(proxy.IPv4, Options{})
		if err != nil {
			return err
		}
		defer q.Close()
		if err := q.Sync(context.Background(), benchState(300), proxytest.ModeOf(benchState(300))); err != nil {
			return fmt.Errorf("restart: %w", err)
		}
		if q.last.Operations != 0 {
			return fmt.Errorf("restart after growth sent %d operations, want none", q.last.Operations)
		}
		grown := 0
		for name, m := range q.store.sets {
			if m.desired == nil || !m.desired.bound {
				continue
			}
			if n := q.store.elemCount(name); m.size < n || m.size == 0 {
				return fmt.Errorf("%s read back with size %d for %d elements", name, m.size, n)
			}
			if m.size > small[name] && small[name] != 0 {
				grown++
			}
		}
		if grown == 0 {
			return fmt.Errorf("no endpoint map grew: %v", small)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestEndpointMapSlots: every shared endpoint map's name tells its
// endpoint count, which bounds the slots of its groups (the read-back
// groups no more); no other set's name passes for one.
func TestEndpointMapSlots(t *testing.T) {
	c := newConfig(benchState(1))
	classes := []func(frontendKind, int, int, ...string) *chainSpec{c.internalChain, c.externalChain, c.clusterChain, c.localChain}
	for _, class := range classes {
		for _, kind := range []frontendKind{ipFrontend, nodePortFrontend} {
			for _, n := range []int{1, 10, 257} {
				m := class(kind, n, 7).epMap.name
				if got, ok := endpointMapSlots(m); !ok || got != n {
					t.Errorf("endpointMapSlots(%q) = %d, %v; want %d", m, got, ok, n)
				}
			}
		}
	}
	for _, set := range []string{mapServiceIPs, setClusterIPs, hairpinSets[3], "internal-endpoints-s1", "internal-endpoints-x-s1",
		"internal-endpoints-0-s1", affinitySet(benchName(1), netip.MustParseAddrPort("10.0.0.1:80"))} {
		if n, ok := endpointMapSlots(set); ok {
			t.Errorf("endpointMapSlots(%q) = %d, true; want no endpoint map", set, n)
		}
	}
}

// TestEndpointMapOutgrown: a map is re-created bigger when the elements
// its entries stand for exceed its size, and only then: a count under
// the bound of n per entry (a read-back element of its own counts one)
// keeps it.
func TestEndpointMapOutgrown(t *testing.T) {
	const m = "internal-endpoints-10-s0"
	s := newStore()
	sink := newStoreSink(s, proxy.IPv4)
	sink.Set(knft.SetInfo{Name: m, IsMap: true, Size: 64})
	group := func(frontend string) {
		var kv []string
		for slot := range 10 {
			kv = append(kv, slotElemKey(frontend, slot), fmt.Sprintf("10.0.0.%d . 80", slot))
		}
		readElements(sink, m, kv...)
	}
	for i := range 6 {
		group(fmt.Sprintf("172.30.0.%d . tcp . 80", i))
	}
	readElements(sink, m, "st", "10.0.0.1 . 80") // no frontend · slot: an element of its own
	sink.SetListed(m)
	e := s.sets[m]
	// 7 entries × 10 > 64, but they stand for 61 elements.
	if s.epMapOutgrown(m, e) {
		t.Errorf("61 elements outgrew a map of size 64")
	}
	if size := s.epMapSize(m, e, false); size != 64 {
		t.Errorf("size %d, want the kernel's 64", size)
	}
	group("172.30.0.99 . tcp . 80")
	sink.finish()
	if !s.epMapOutgrown(m, e) {
		t.Errorf("71 elements fit a map of size 64")
	}
	if size := s.epMapSize(m, e, true); size != 256 {
		t.Errorf("re-created with size %d for 71 elements, want 256", size)
	}
	e.size = 0 // made without a size: no limit
	if s.epMapOutgrown(m, e) {
		t.Errorf("a map without a size outgrew it")
	}
}
