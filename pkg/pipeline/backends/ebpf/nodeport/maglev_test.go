package nodeport

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"github.com/svcproxy/svcproxy/pkg/pipeline/backends/ebpf/bpfmap"
	"github.com/svcproxy/svcproxy/pkg/pipeline/desired"
	"github.com/svcproxy/svcproxy/pkg/pipeline/maglev"
	"github.com/svcproxy/svcproxy/pkg/proxy"
)

// maglevPorts is how many Maglev service ports TestKernelMaglevMemory
// programs: SVCPROXY_MAGLEV_PORTS, else 1,000.
func maglevPorts(t *testing.T) int {
	if s := os.Getenv("SVCPROXY_MAGLEV_PORTS"); s != "" {
		n, err := strconv.Atoi(s)
		must(t, err)
		return n
	}
	return 1000
}

// TestKernelMaglevMemory programs Maglev service ports of three endpoints
// each (a table of the smallest size apiece) and prints the kernel memory
// charged to the maps (memlock, the inner maps of a map of maps included).
// A table of 16381 slots takes 16381 array elements, 8 bytes each: the
// maps must stay within twice that per port. An unchanged sync writes
// nothing, and neither does a restart, which reads every table back.
func TestKernelMaglevMemory(t *testing.T) {
	n := maglevPorts(t)
	ns, pins := progNS(t)
	var sps []*desired.ServicePort
	for i := range n {
		sp := port(fmt.Sprintf("web%d", i), proxy.TCP, 0, ep(netip.AddrFrom4([4]byte{198, 19, 1, 2}), 8080),
			ep(netip.AddrFrom4([4]byte{198, 19, 1, 3}), 8080), ep(netip.AddrFrom4([4]byte{198, 19, 2, byte(i)}), 8080))
		sp.ExternalIPs = []netip.Addr{netip.AddrFrom4([4]byte{198, 18, byte(100 + i>>8), byte(i)})}
		sp.ExternalBalancing = proxy.BalanceMaglev
		sps = append(sps, sp)
	}
	p := progProxier(t, pins, "node")
	start := time.Now()
	must(t, ns.Do(func() error {
		return p.Sync(context.Background(), stateOf(netip.MustParseAddr("198.18.0.11"), sps...), proxy.FullSync)
	}))
	t.Logf("the first sync of %d Maglev ports took %v", n, time.Since(start).Round(time.Millisecond))
	total := uint64(0)
	for _, name := range slices.Sorted(maps.Keys(p.kernel.coll.Maps)) {
		b, err := memlock(p.kernel.coll.Maps[name])
		must(t, err)
		total += b
		t.Logf("%-12s %12d bytes", name, b)
	}
	maglevBytes, err := memlock(p.kernel.coll.Maps[mapMaglev])
	must(t, err)
	t.Logf("%d Maglev ports: all maps %d bytes, np_maglev %d bytes (%d per port)", n, total, maglevBytes, maglevBytes/uint64(n))
	if limit := uint64(n) * 2 * 16381 * 8; maglevBytes > limit {
		t.Errorf("np_maglev takes %d bytes for %d tables of 16381 slots, want at most %d", maglevBytes, n, limit)
	}
	writes := p.Writes()
	start = time.Now()
	must(t, ns.Do(func() error {
		return p.Sync(context.Background(), stateOf(netip.MustParseAddr("198.18.0.11"), sps...), proxy.FullSync)
	}))
	t.Logf("an unchanged sync took %v", time.Since(start).Round(time.Millisecond))
	if w := p.Writes() - writes; w != 0 {
		t.Errorf("an unchanged sync wrote %d entries", w)
	}
	p.Close()
	again := progProxier(t, pins, "node")
	start = time.Now()
	must(t, ns.Do(func() error {
		return again.Sync(context.Background(), stateOf(netip.MustParseAddr("198.18.0.11"), sps...), proxy.FullSync)
	}))
	t.Logf("a restart's sync (every table read back) took %v", time.Since(start).Round(time.Millisecond))
	if w := again.Writes(); w != 0 {
		t.Errorf("a restart with the same State wrote %d entries", w)
	}
}

// memlock is the kernel memory charged to m, and to the maps it holds
// when it is a map of maps.
func memlock(m *ebpf.Map) (uint64, error) {
	info, err := m.Info()
	if err != nil {
		return 0, err
	}
	b, _ := info.Memlock()
	if m.Type() != ebpf.HashOfMaps {
		return b, nil
	}
	var k uint64
	var id ebpf.MapID
	it := m.Iterate()
	for it.Next(&k, &id) {
		inner, err := ebpf.NewMapFromID(id)
		if err != nil {
			return 0, err
		}
		ib, err := memlock(inner)
		inner.Close()
		if err != nil {
			return 0, err
		}
		b += ib
	}
	return b, it.Err()
}

// maglevEps are n endpoints of the Maglev tests.
func maglevEps(n int) []proxy.Endpoint {
	var eps []proxy.Endpoint
	for i := range n {
		eps = append(eps, ep(netip.AddrFrom4([4]byte{198, 19, 1, byte(2 + i)}), 8080))
	}
	return eps
}

// maglevPort is the external port of the Maglev tests, balanced by
// Maglev over eps.
func maglevPort(eps []proxy.Endpoint) *desired.ServicePort {
	sp := external(proxy.TCP, eps...)
	sp.ExternalBalancing = proxy.BalanceMaglev
	return sp
}

// table returns the array np_maglev holds for group id.
func table(t *testing.T, p *Proxier, id uint64) *ebpf.Map {
	t.Helper()
	var inner ebpf.MapID
	must(t, p.kernel.coll.Maps[mapMaglev].Lookup(id, &inner))
	m, err := ebpf.NewMapFromID(inner)
	must(t, err)
	t.Cleanup(func() { m.Close() })
	return m
}

// slotsOf reads a table's slots.
func slotsOf(t *testing.T, m *ebpf.Map) []beVal {
	t.Helper()
	out := make([]beVal, m.MaxEntries())
	must(t, bpfmap.Table[uint32, beVal]{M: m}.Each(func(k uint32, v beVal) error { out[k] = v; return nil }))
	return out
}

// TestKernelMaglevSwapsWholeTable: an endpoint change writes the group's
// new table into a new array and swaps it in with one update: the array
// flows read until then still holds the old table, every slot of it, and
// the group's entry names the new one, which holds the new table. A
// restart with the same State writes nothing; one that finds a table
// changed by hand rewrites that table alone.
func TestKernelMaglevSwapsWholeTable(t *testing.T) {
	ns, pins := progNS(t)
	p := progProxier(t, pins, "node")
	eps := maglevEps(10)
	syncIn(t, ns, p, maglevPort(eps))
	id := Render(stateOf(nodeIP, maglevPort(eps))).Services[frontendKey[[4]byte](vip, 80, 6)].ID
	old := table(t, p, id)
	before := slotsOf(t, old)
	if want := maglevSlots[[4]byte](eps); !slices.Equal(before, want) {
		t.Fatalf("np_maglev holds %d slots that are not Go's table of %d", len(before), len(want))
	}
	writes := p.Writes()
	rest := slices.Delete(slices.Clone(eps), 3, 4)
	syncIn(t, ns, p, maglevPort(rest))
	// The slot list shrinks by one (slots rewritten, the last deleted),
	// the table is one write, the frontend's record is unchanged.
	if n := p.Writes() - writes; n > uint64(len(eps))+1 {
		t.Errorf("the change wrote %d entries, want at most %d: the table is swapped, not written slot by slot", n, len(eps)+1)
	}
	if got := slotsOf(t, old); !slices.Equal(got, before) {
		t.Errorf("the table flows read before the change was modified: it must be replaced, not rewritten")
	}
	if got, want := slotsOf(t, table(t, p, id)), maglevSlots[[4]byte](rest); !slices.Equal(got, want) {
		t.Errorf("np_maglev's new table is not Go's table of the 9 endpoints left")
	}

	p.Close()
	again := progProxier(t, pins, "node")
	syncIn(t, ns, again, maglevPort(rest))
	if n := again.Writes(); n != 0 {
		t.Errorf("a restart with the same State wrote %d entries", n)
	}
	tampered := table(t, again, id)
	must(t, tampered.Put(uint32(0), endpointVal[[4]byte](eps[3])))
	again.Close()
	third := progProxier(t, pins, "node")
	syncIn(t, ns, third, maglevPort(rest))
	if n := third.Writes(); n != 1 {
		t.Errorf("a restart that found one table changed wrote %d entries, want 1 (the table)", n)
	}
	if got, want := slotsOf(t, table(t, third, id)), maglevSlots[[4]byte](rest); !slices.Equal(got, want) {
		t.Errorf("the table changed by hand was not rewritten")
	}
}

// TestKernelMaglevAdoptsOldLayout: a start that finds np_maglev pinned
// as an older svcproxy left it (one hash entry per slot) pins its map of
// tables by another name (np_maglev_v2) and serves the Maglev port from
// it, and removes the older map's pin, and one of a layout a later
// version might pin, so that no version finds a layout it does not know
// under a name it uses.
func TestKernelMaglevAdoptsOldLayout(t *testing.T) {
	ns, pins := progNS(t)
	dir := filepath.Join(pins, "node")
	must(t, ns.Do(func() error {
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return err
		}
		for _, pin := range []string{mapMaglev, "np_later_v9"} {
			old, err := ebpf.NewMap(&ebpf.MapSpec{Type: ebpf.Hash, KeySize: 16, ValueSize: 8, MaxEntries: 1 << 14,
				Flags: unix.BPF_F_NO_PREALLOC})
			if err != nil {
				return err
			}
			err = old.Pin(filepath.Join(dir, pin))
			old.Close()
			if err != nil {
				return err
			}
		}
		return nil
	}))
	p := progProxier(t, pins, "node")
	eps := maglevEps(3)
	syncIn(t, ns, p, maglevPort(eps))
	if typ := p.kernel.coll.Maps[mapMaglev].Type(); typ != ebpf.HashOfMaps {
		t.Fatalf("np_maglev is a %v after the start, want a map of tables", typ)
	}
	pinned, err := ebpf.LoadPinnedMap(filepath.Join(dir, pinName(mapMaglev)), nil)
	must(t, err)
	if !sameMap(pinned, p.kernel.coll.Maps[mapMaglev]) {
		t.Errorf("%s is not the map the programs read", pinName(mapMaglev))
	}
	pinned.Close()
	for _, pin := range []string{mapMaglev, "np_later_v9"} {
		if _, err := os.Stat(filepath.Join(dir, pin)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("the pin %s of a layout this version does not read is still there (%v)", pin, err)
		}
	}
	f := maglev.Flow{Src: netip.MustParseAddr("198.18.0.100"), Dst: vip, SrcPort: 40000, DstPort: 80, Protocol: 6}
	want, _ := maglev.New(eps).Lookup(maglev.FlowHash(f))
	must(t, ns.Do(func() error {
		got, err := translated(p.kernel.coll.Programs["np_ingress"], f)
		if err == nil && got != want.AddrPort() {
			err = fmt.Errorf("flow %+v went to %v, Go's table says %v", f, got, want)
		}
		return err
	}))
}
