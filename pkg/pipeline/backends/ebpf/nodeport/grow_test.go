package nodeport

import (
	"context"
	"encoding/binary"
	"fmt"
	"net/netip"
	"path/filepath"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"

	"github.com/svcproxy/svcproxy/pkg/pipeline/desired"
	"github.com/svcproxy/svcproxy/pkg/pipeline/maglev"
	"github.com/svcproxy/svcproxy/pkg/proxy"
	"github.com/svcproxy/svcproxy/pkg/testing/netnstest"
)

var (
	growNode4 = netip.MustParseAddr("198.18.0.11")
	growNode6 = netip.MustParseAddr("fd00:18::11")
)

// externals6 is an IPv6 State of n service ports, each with an external
// IP of its own (fd00:18::100 + i) and one endpoint: n frontends.
func externals6(n int) *desired.State {
	var sps []*desired.ServicePort
	for i := range n {
		sp := port(fmt.Sprint("web", i), proxy.TCP, 0, ep(externalEndpoint6(i), 8080))
		sp.ExternalIPs = []netip.Addr{externalIP6(i)}
		sps = append(sps, sp)
	}
	return stateOf6(growNode6, sps...)
}

func externalIP6(i int) netip.Addr {
	return netip.AddrFrom16([16]byte{0xfd, 0, 0, 0x18, 14: 1, 15: byte(i)})
}

func externalEndpoint6(i int) netip.Addr {
	return netip.AddrFrom16([16]byte{0xfd, 0, 0, 0x19, 14: 1, 15: byte(i)})
}

// translated6 runs np_ingress over a SYN of a new flow to the i-th
// external IP of externals6 and returns where the packet went.
func translated6(p *Proxier, i int) (netip.AddrPort, error) {
	f := maglev.Flow{Src: netip.MustParseAddr("fd00:9::7"), Dst: externalIP6(i), SrcPort: uint16(40000 + i),
		DstPort: 80, Protocol: 6}
	opts := &ebpf.RunOptions{Data: packet6(f, tcpSYN), DataOut: make([]byte, 256)}
	if _, err := p.kernel.coll.Programs["np_ingress"].Run(opts); err != nil {
		return netip.AddrPort{}, err
	}
	ip := opts.DataOut[14:]
	return netip.AddrPortFrom(netip.AddrFrom16([16]byte(ip[24:40])), binary.BigEndian.Uint16(ip[42:44])), nil
}

// mapID is the kernel's ID of p's map name: the same ID is the same map.
func mapID(t *testing.T, p *Proxier, name string) ebpf.MapID {
	t.Helper()
	info, err := p.kernel.coll.Maps[name].Info()
	must(t, err)
	id, _ := info.ID()
	return id
}

func syncState(t *testing.T, ns *netnstest.NS, p *Proxier, st *desired.State) {
	t.Helper()
	must(t, ns.Do(func() error { return p.Sync(context.Background(), st, proxy.FullSync) }))
}

// TestKernelFamilyOutgrowsItsMaps: the IPv4 State syncs first and creates
// both families' maps, IPv6's the least (no expected size); the larger
// IPv6 State that follows grows IPv6's maps in place: its frontends are
// translated, IPv4's maps and both conntrack tables are the same maps,
// and the pins name the grown maps. A restart adopts them and writes
// nothing.
func TestKernelFamilyOutgrowsItsMaps(t *testing.T) {
	ns, pins := progNS(t)
	p := progProxier(t, pins, "np")
	p.minEntries = 4
	st4 := stateOf(growNode4, external(proxy.TCP, ep(netip.MustParseAddr("198.19.1.2"), 8080)))
	syncState(t, ns, p, st4)
	if c := p.kernel.coll.Maps[maps6.services].MaxEntries(); c != 4 {
		t.Fatalf("IPv6's frontends map created with %d entries before any IPv6 State, want the least, 4", c)
	}
	shared := map[string]ebpf.MapID{}
	for _, name := range []string{maps4.services, maps4.ct, maps6.ct, mapDevices} {
		shared[name] = mapID(t, p, name)
	}
	st6 := externals6(10)
	syncState(t, ns, p, st6)
	for _, name := range []string{maps6.services, maps6.backends} {
		pinned, err := ebpf.LoadPinnedMap(filepath.Join(pins, "np", name), nil)
		must(t, err)
		if c := pinned.MaxEntries(); c < 16 || c != p.kernel.coll.Maps[name].MaxEntries() {
			t.Errorf("pinned %s holds %d entries, want the grown map's %d (room for 10 frontends)",
				name, c, p.kernel.coll.Maps[name].MaxEntries())
		}
		pinned.Close()
	}
	for name, id := range shared {
		if got := mapID(t, p, name); got != id {
			t.Errorf("map %s is another map after IPv6's maps grew (ID %d, was %d)", name, got, id)
		}
	}
	var v svcVal
	must(t, p.kernel.coll.Maps[maps4.services].Lookup(frontendKey[[4]byte](vip, 80, 6), &v))
	must(t, ns.Do(func() error {
		for i := range 10 {
			got, err := translated6(p, i)
			if err != nil {
				return err
			}
			if want := netip.AddrPortFrom(externalEndpoint6(i), 8080); got != want {
				return fmt.Errorf("a SYN to %s went to %v, want %v", externalIP6(i), got, want)
			}
		}
		return nil
	}))
	before := p.Writes()
	syncState(t, ns, p, st6)
	if n := p.Writes() - before; n != 0 {
		t.Errorf("syncing the same IPv6 State again wrote %d entries, want 0", n)
	}

	p.Close()
	again := progProxier(t, pins, "np")
	again.minEntries = 4
	syncState(t, ns, again, st6)
	syncState(t, ns, again, st4)
	if n := again.Writes(); n != 0 {
		t.Errorf("a restart with the same States wrote %d entries, want 0", n)
	}
}

// TestKernelPinnedMapsTooSmall: an earlier svcproxy pinned IPv6's maps
// for a State of 2 frontends; a restart whose State has 10 grows them at
// its first sync, rather than failing every sync for a restart that would
// adopt the same pins.
func TestKernelPinnedMapsTooSmall(t *testing.T) {
	ns, pins := progNS(t)
	p := progProxier(t, pins, "np")
	p.minEntries = 4
	syncState(t, ns, p, externals6(2))
	p.Close()
	for range 2 {
		again := progProxier(t, pins, "np")
		again.minEntries = 4
		syncState(t, ns, again, externals6(10))
		if c := again.kernel.coll.Maps[maps6.services].MaxEntries(); c < 10 {
			t.Fatalf("IPv6's frontends map holds %d entries after a sync of 10 frontends", c)
		}
		again.Close()
	}
}

// TestKernelExpectedSizeOfTheOtherFamily: the IPv4 State's sync creates
// IPv6's maps at the size IPv6's State is expected to have, so that
// IPv6's first sync fits them and does not load the programs again.
func TestKernelExpectedSizeOfTheOtherFamily(t *testing.T) {
	ns, pins := progNS(t)
	p := progProxier(t, pins, "np")
	p.minEntries = 4
	p.ExpectSize(proxy.IPv6, proxy.ExpectedSize{ServicePorts: 10, EndpointPorts: 10})
	if !p.CreatesMaps() {
		t.Fatal("CreatesMaps is false before any map was created")
	}
	syncState(t, ns, p, stateOf(growNode4, external(proxy.TCP, ep(netip.MustParseAddr("198.19.1.2"), 8080))))
	if c := p.kernel.coll.Maps[maps6.services].MaxEntries(); c != 32 {
		t.Errorf("IPv6's frontends map created with %d entries, want 32: room for twice the 10 expected", c)
	}
	if c := p.kernel.coll.Maps[maps4.services].MaxEntries(); c != 4 {
		t.Errorf("IPv4's frontends map created with %d entries for its State of 1, want 4", c)
	}
	loaded := p.kernel
	syncState(t, ns, p, externals6(10))
	if p.kernel != loaded {
		t.Error("IPv6's first sync loaded the programs again (grew its maps) although they were created at its expected size")
	}
	if p.CreatesMaps() {
		t.Error("CreatesMaps is true with the maps loaded")
	}
}

// TestKernelGrowMovesTheLinks: with the tc programs and np_xdp attached to
// two interfaces, a growth moves every pinned link (tc and XDP) to the
// programs of the grown maps: the old ones, whose maps lack the new
// frontends, no longer run anywhere.
func TestKernelGrowMovesTheLinks(t *testing.T) {
	r := newXDPRig(t, AccelerationNative)
	r.p.minEntries = 4
	r.sync(t, port("web", proxy.TCP, 30080, ep(r.epC, 8080)))
	old := r.p.kernel
	must(t, r.node.Do(func() error { return r.p.Sync(context.Background(), externals6(10), proxy.FullSync) }))
	if r.p.kernel == old {
		t.Fatal("a State of 10 IPv6 frontends fit maps of 4 entries")
	}
	for _, iface := range []string{"a0", "c0"} {
		for _, prog := range []string{"np_ingress", "np_egress", progXDP} {
			lk, err := link.LoadPinnedLink(linkPin(r.pins, prog, iface), nil)
			must(t, err)
			info, err := lk.Info()
			must(t, err)
			lk.Close()
			want, err := r.p.kernel.coll.Programs[prog].Info()
			must(t, err)
			if id, _ := want.ID(); info.Program != id {
				t.Errorf("the link of %s on %s runs program %d, want the grown maps' %d", prog, iface, info.Program, id)
			}
		}
	}
}
