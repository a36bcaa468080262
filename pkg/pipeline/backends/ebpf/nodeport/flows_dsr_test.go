package nodeport

import (
	"context"
	"encoding/binary"
	"errors"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"github.com/svcproxy/svcproxy/pkg/kconntrack"
	"github.com/svcproxy/svcproxy/pkg/pipeline/desired"
	"github.com/svcproxy/svcproxy/pkg/proxy"
	"github.com/svcproxy/svcproxy/pkg/testing/netnstest"
)

// The flows of the tests below: a client of an LB IP, this node, two peer
// nodes and a pod of this node.
var (
	dsrClient = netip.MustParseAddrPort("203.0.113.7:40000")
	dsrFront  = netip.AddrPortFrom(dsrLB, 80)
	dsrPod    = netip.MustParseAddrPort("198.19.1.2:8080")
)

// newCTMap is a table laid out as A's family's np_ct, of the test's own.
func newCTMap[A addrBytes](t *testing.T) *ebpf.Map {
	t.Helper()
	netnstest.RequireKernel(t)
	m, err := ebpf.NewMap(&ebpf.MapSpec{Type: ebpf.Hash, MaxEntries: 64,
		KeySize: uint32(binary.Size(ctKeyOf[A]{})), ValueSize: uint32(binary.Size(ctValOf[A]{}))})
	must(t, err)
	t.Cleanup(func() { m.Close() })
	return m
}

// entry is a conntrack entry for packets from → to, rewritten to
// toSrc → toDst, applied at at.
type entry struct {
	proto               uint8
	from, to            netip.AddrPort
	toSrc, toDst        netip.AddrPort
	at, state, reply, f uint8
}

func (e entry) put(t *testing.T, ct *ebpf.Map, seen uint64) ctKey {
	t.Helper()
	k := keyOf[[4]byte](e.proto, kconntrack.Tuple{Src: e.from, Dst: e.to})
	v := ctVal{Src: e.toSrc.Addr().As4(), Dst: e.toDst.Addr().As4(), Sport: netPort(e.toSrc.Port()),
		Dport: netPort(e.toDst.Port()), At: e.at, State: e.state, Reply: e.reply, Flags: e.f, Seen: seen}
	must(t, ct.Put(k, v))
	return k
}

// tunnelEntry is node1's one entry of a flow tunnelled to node: the
// packet itself unchanged, the tunnel's addresses in the rewrite.
func tunnelEntry(proto uint8, client netip.AddrPort, node netip.Addr, state uint8) entry {
	return entry{proto: proto, from: client, to: dsrFront, toSrc: netip.AddrPortFrom(nodeIP, client.Port()),
		toDst: netip.AddrPortFrom(node, dsrFront.Port()), at: ctAtTunnel, state: state}
}

// tunnelledIn is the pair of entries a peer's tunnelled flow leaves on
// the node of its endpoint: DNAT to the pod, and the reply back from the
// frontend, both flagged.
func tunnelledIn(proto uint8, client netip.AddrPort, state uint8) []entry {
	return []entry{
		{proto: proto, from: client, to: dsrFront, toSrc: client, toDst: dsrPod, state: state, f: ctFlagTunneled},
		{proto: proto, from: dsrPod, to: client, toSrc: dsrFront, toDst: client, at: ctAtEgress, state: state, reply: 1, f: ctFlagTunneled},
	}
}

// TestKernelTunnelFlowsNotListed: the conntrack cleanup reads no flow this
// node tunnels to a peer (its entry names the node, which the cleanup's
// rule would take for a stale endpoint, deleting every such UDP flow), and
// reads a flow a peer tunnelled here as any local endpoint's: the pod
// answers it.
func TestKernelTunnelFlowsNotListed(t *testing.T) {
	ct := newCTMap[[4]byte](t)
	now := mustNow(t)
	tunnelEntry(unix.IPPROTO_UDP, dsrClient, peerIP, ctNew).put(t, ct, now)
	other := netip.AddrPortFrom(dsrClient.Addr(), 40001)
	for _, e := range tunnelledIn(unix.IPPROTO_UDP, other, ctEstablished) {
		e.put(t, ct, now)
	}
	var got []kconntrack.Flow
	must(t, listFlows[[4]byte](context.Background(), ct, func(f kconntrack.Flow) { got = append(got, f) }))
	want := kconntrack.Flow{Proto: unix.IPPROTO_UDP, Orig: kconntrack.Tuple{Src: other, Dst: dsrFront},
		Reply: kconntrack.Tuple{Src: dsrPod, Dst: other}, Replied: true}
	if len(got) != 1 || got[0] != want {
		t.Errorf("listed %v, want the tunnelled-in flow alone: %v", got, want)
	}
}

// TestKernelDeleteTunnelFlows: the routes a sync drops delete exactly the
// UDP flows tunnelled along them: not those to a node still serving the
// frontend, not TCP's, not a flow a peer tunnelled here.
func TestKernelDeleteTunnelFlows(t *testing.T) {
	ct := newCTMap[[4]byte](t)
	now := mustNow(t)
	gone := tunnelEntry(unix.IPPROTO_UDP, dsrClient, peerIP, ctNew).put(t, ct, now)
	kept := []ctKey{
		tunnelEntry(unix.IPPROTO_UDP, netip.AddrPortFrom(dsrClient.Addr(), 40001), peer2IP, ctNew).put(t, ct, now),
		tunnelEntry(unix.IPPROTO_TCP, dsrClient, peerIP, ctEstablished).put(t, ct, now),
	}
	for _, e := range tunnelledIn(unix.IPPROTO_UDP, netip.AddrPortFrom(dsrClient.Addr(), 40002), ctEstablished) {
		kept = append(kept, e.put(t, ct, now))
	}
	route := func(node netip.Addr) tunnelRoute[[4]byte] {
		return tunnelRoute[[4]byte]{Frontend: frontendKey[[4]byte](dsrFront.Addr(), dsrFront.Port(), unix.IPPROTO_UDP), Node: node.As4()}
	}
	was := map[tunnelRoute[[4]byte]]struct{}{route(peerIP): {}, route(peer2IP): {}}
	lost := lostRoutes(was, map[tunnelRoute[[4]byte]]struct{}{route(peer2IP): {}})
	if len(lost) != 1 {
		t.Fatalf("lost routes %v, want the one to %v", lost, peerIP)
	}
	n, err := deleteTunnelFlows(ct, goneRoutes(was, map[tunnelRoute[[4]byte]]struct{}{route(peer2IP): {}}))
	must(t, err)
	var v ctVal
	if n != 1 || ct.Lookup(gone, &v) == nil {
		t.Errorf("deleted %d flows, the one to %v still there %t; want 1 and gone", n, peerIP, ct.Lookup(gone, &v) == nil)
	}
	for _, k := range kept {
		if err := ct.Lookup(k, &v); err != nil {
			t.Errorf("entry %+v deleted", k)
		}
	}
}

// TestKernelSyncDropsTunnelFlows: a sync after which a UDP DSR port's
// node no longer hosts an endpoint of it deletes the flows tunnelled there,
// counted with the flows deleted, and leaves those to the node still
// hosting one; a sync that keeps both routes deletes nothing; a restarted
// process's first sync deletes the flows of a route lost meanwhile.
func TestKernelSyncDropsTunnelFlows(t *testing.T) {
	r := newXDPRig(t, AccelerationDisabled)
	sp := dsrPort("web", proxy.UDP, 30080)
	sp.DSR.Tunnels = append(sp.DSR.Tunnels, desired.Tunnel{Endpoint: netip.MustParseAddr("198.19.3.2"), Node: peer2IP})
	st := dsrState(sp)
	st.NodeIPs = []netip.Addr{r.nodeIP}
	syncNow := func(st *desired.State) {
		t.Helper()
		must(t, r.node.Do(func() error { return r.p.Sync(context.Background(), st, proxy.FullSync) }))
		r.p.background.Wait()
	}
	syncNow(st)
	ct := r.p.kernel.coll.Maps[mapCT]
	now := mustNow(t)
	toPeer := tunnelEntry(unix.IPPROTO_UDP, dsrClient, peerIP, ctNew).put(t, ct, now)
	toPeer2 := tunnelEntry(unix.IPPROTO_UDP, netip.AddrPortFrom(dsrClient.Addr(), 40001), peer2IP, ctNew).put(t, ct, now)
	syncNow(st)
	var v ctVal
	if ct.Lookup(toPeer, &v) != nil || ct.Lookup(toPeer2, &v) != nil {
		t.Fatal("a sync of the same State deleted a tunnelled flow")
	}
	sp.DSR.Tunnels = sp.DSR.Tunnels[1:]
	syncNow(st)
	if ct.Lookup(toPeer, &v) == nil {
		t.Errorf("the flow tunnelled to %v, which hosts no endpoint of the port now, is still there: %+v", peerIP, v)
	}
	if ct.Lookup(toPeer2, &v) != nil {
		t.Errorf("the flow tunnelled to %v, which still hosts one, was deleted", peer2IP)
	}
	if n := r.p.Flows().Deleted(proxy.IPv4); n != 1 {
		t.Errorf("%d flows counted deleted, want 1", n)
	}

	// A route lost while no svcproxy ran: the restarted process's first
	// sync deletes its flows too, and keeps those of a route it has.
	toPeer = tunnelEntry(unix.IPPROTO_UDP, dsrClient, peerIP, ctNew).put(t, ct, mustNow(t))
	r.p.Close()
	r.p = r.proxier(t, AccelerationDisabled, "a0", "c0")
	syncNow(st)
	if ct = r.p.kernel.coll.Maps[mapCT]; ct.Lookup(toPeer, &v) == nil {
		t.Errorf("after a restart, the flow tunnelled to %v, which lost the port before, is still there: %+v", peerIP, v)
	}
	if ct.Lookup(toPeer2, &v) != nil {
		t.Errorf("after a restart, the flow tunnelled to %v, which still hosts an endpoint, was deleted", peer2IP)
	}
}

// TestKernelHandOverSkipsTunnels: of established flows, the kernel is
// handed the local endpoint's, never one tunnelled to a peer (the kernel
// cannot encapsulate it) or from one (the kernel does not see the tunnel
// its packets come in): those are counted, to be reset.
func TestKernelHandOverSkipsTunnels(t *testing.T) {
	ct := newCTMap[[4]byte](t)
	now := mustNow(t)
	tunnelEntry(unix.IPPROTO_TCP, dsrClient, peerIP, ctEstablished).put(t, ct, now)
	for _, e := range tunnelledIn(unix.IPPROTO_TCP, netip.AddrPortFrom(dsrClient.Addr(), 40001), ctEstablished) {
		e.put(t, ct, now)
	}
	local := netip.AddrPortFrom(dsrClient.Addr(), 40002)
	for _, e := range tunnelledIn(unix.IPPROTO_TCP, local, ctEstablished) {
		e.f = 0
		e.put(t, ct, now)
	}
	flows, tunnelled, err := handoverFlows[[4]byte](ct, DefaultDrainTimes)
	must(t, err)
	if len(flows) != 1 || flows[0].Orig.Src != local || tunnelled != 2 {
		t.Errorf("handed over %v, %d tunnelled; want the local endpoint's flow from %v alone, 2 tunnelled", flows, tunnelled, local)
	}
}

// TestKernelTunnelFlowsReserveNoPort: a flow tunnelled to a peer keeps
// its client's port (its packets leave unchanged): seeding the
// masquerade ports' reservations reserves nothing for it, nor for a flow
// a peer tunnelled here.
func TestKernelTunnelFlowsReserveNoPort(t *testing.T) {
	ct := newCTMap[[4]byte](t)
	netnstest.RequireKernel(t)
	snat, err := ebpf.NewMap(&ebpf.MapSpec{Type: ebpf.Hash, MaxEntries: 64,
		KeySize: uint32(binary.Size(ctKey{})), ValueSize: uint32(binary.Size(snatVal{}))})
	must(t, err)
	defer snat.Close()
	now := mustNow(t)
	tunnelEntry(unix.IPPROTO_UDP, dsrClient, peerIP, ctNew).put(t, ct, now)
	for _, e := range tunnelledIn(unix.IPPROTO_UDP, netip.AddrPortFrom(dsrClient.Addr(), 40001), ctEstablished) {
		e.put(t, ct, now)
	}
	lost, err := seedSNAT[[4]byte](ct, snat, now)
	must(t, err)
	var (
		k ctKey
		r snatVal
	)
	if it := snat.Iterate(); it.Next(&k, &r) || lost != 0 {
		t.Errorf("seeding reserved %+v for %+v (%d lost), want nothing", k, r, lost)
	}
}

// TestKernelDrainHoldsTunnelFlows: while draining, a flow tunnelled to a
// peer holds the programs as any other (its packets need them), and goes
// once done.
func TestKernelDrainHoldsTunnelFlows(t *testing.T) {
	ct := newCTMap[[4]byte](t)
	now := mustNow(t)
	live := tunnelEntry(unix.IPPROTO_TCP, dsrClient, peerIP, ctEstablished).put(t, ct, now)
	done := tunnelEntry(unix.IPPROTO_UDP, dsrClient, peerIP, ctNew).put(t, ct, now-uint64(time.Minute))
	held, err := sweep[[4]byte](ct, DefaultDrainTimes)
	must(t, err)
	var v ctVal
	if held != 1 || ct.Lookup(live, &v) != nil || ct.Lookup(done, &v) == nil {
		t.Errorf("%d flows held, the open one kept %t, the quiet one deleted %t; want 1, true, true",
			held, ct.Lookup(live, &v) == nil, ct.Lookup(done, &v) != nil)
	}
}

// TestEntryString: an operator reads where a tunnelled flow goes, and
// that a flow came tunnelled.
func TestEntryString(t *testing.T) {
	k := keyOf[[4]byte](unix.IPPROTO_TCP, kconntrack.Tuple{Src: dsrClient, Dst: dsrFront})
	e := tunnelEntry(unix.IPPROTO_TCP, dsrClient, peerIP, ctEstablished)
	v := ctVal{Src: nodeIP.As4(), Dst: peerIP.As4(), Sport: netPort(e.toSrc.Port()), Dport: netPort(80), At: ctAtTunnel, State: ctEstablished}
	if got, want := entryOf(k, v).String(), "tcp 203.0.113.7:40000 -> 198.18.200.1:80: tunnel to 198.18.0.12 (established)"; got != want {
		t.Errorf("tunnel entry: %q, want %q", got, want)
	}
	in := tunnelledIn(unix.IPPROTO_UDP, dsrClient, ctNew)[0]
	v = ctVal{Src: in.toSrc.Addr().As4(), Dst: in.toDst.Addr().As4(), Sport: netPort(in.toSrc.Port()), Dport: netPort(in.toDst.Port()),
		Flags: ctFlagTunneled}
	k.Proto = unix.IPPROTO_UDP
	if got := entryOf(k, v).String(); !strings.Contains(got, "up the stack as 203.0.113.7:40000 -> 198.19.1.2:8080, tunnelled in (new)") {
		t.Errorf("tunnelled-in entry: %q", got)
	}
}

// TestKernelDSRMaps: a sync writes each family's tunnels and peers into
// its maps, in the family's layout; a restart adopting them writes
// nothing for the same States; a State without DSR deletes them; Drops
// reads each family's DSR counters.
func TestKernelDSRMaps(t *testing.T) {
	r := newXDPRig(t, AccelerationDisabled)
	node6, peer6 := netip.MustParseAddr("fd00:18::11"), netip.MustParseAddr("fd00:18::12")
	remote6 := netip.MustParseAddr("fd00:19:2::2")
	st4 := dsrState(dsrPort("web", proxy.TCP, 30080))
	st4.NodeIPs = []netip.Addr{r.nodeIP}
	sp6 := port("web", proxy.TCP, 30080, ep(remote6, 8080))
	sp6.DSR = &desired.DSR{Tunnels: []desired.Tunnel{{Endpoint: remote6, Node: peer6}}}
	st6 := stateOf6(node6, sp6)
	st6.Peers = []netip.Addr{peer6}
	syncBoth := func(p *Proxier, st4, st6 *desired.State) {
		t.Helper()
		must(t, r.node.Do(func() error {
			return errors.Join(p.Sync(context.Background(), st4, proxy.RecoverySync), p.Sync(context.Background(), st6, proxy.RecoverySync))
		}))
	}
	syncBoth(r.p, st4, st6)
	maps := r.p.kernel.coll.Maps
	var (
		v4 tunnelVal
		v6 tunnelVal6
		pv peerVal
	)
	must(t, maps[mapTunnels].Lookup(epB.IP.As4(), &v4))
	must(t, maps[mapTunnels+"6"].Lookup(remote6.As16(), &v6))
	must(t, maps[mapPeers].Lookup(peerIP.As4(), &pv))
	must(t, maps[mapPeers+"6"].Lookup(peer6.As16(), &pv))
	if v4 != (tunnelVal{Node: peerIP.As4()}) || v6 != (tunnelVal6{Node: peer6.As16()}) {
		t.Errorf("tunnels %+v, %+v; want %v and %v", v4, v6, peerIP, peer6)
	}
	r.p.Close()

	again := r.proxier(t, AccelerationDisabled, "a0", "c0")
	syncBoth(again, st4, st6)
	if n := again.Writes(); n != 0 {
		t.Errorf("the restarted Proxier wrote %d entries for unchanged States, want 0", n)
	}
	syncBoth(again, stateOf(r.nodeIP, port("web", proxy.TCP, 30080, epA)), stateOf6(node6, port("web", proxy.TCP, 30080, ep(remote6, 8080))))
	maps = again.kernel.coll.Maps
	for _, name := range []string{mapTunnels, mapTunnels + "6", mapPeers, mapPeers + "6"} {
		if n := countEntries(t, maps[name]); n != 0 {
			t.Errorf("%s holds %d entries once no port has DSR, want 0", name, n)
		}
	}

	per := make([]uint64, ebpf.MustPossibleCPU())
	per[0] = 3
	must(t, maps[mapStatsDSR].Put(uint32(statDSRNoFlow), per))
	per[0] = 5
	must(t, maps[mapStatsDSR].Put(uint32(statsDSR+statDSRTooBig), per))
	d4, err := again.Drops(proxy.IPv4)
	must(t, err)
	d6, err := again.Drops(proxy.IPv6)
	must(t, err)
	if d4.DSRNoFlow != 3 || d4.DSRTooBig != 0 || d6.DSRTooBig != 5 || d6.DSRNoFlow != 0 {
		t.Errorf("DSR drops %+v and %+v, want IPv4's 3 without a flow, IPv6's 5 too big", d4, d6)
	}
}

func countEntries(t *testing.T, m *ebpf.Map) int {
	t.Helper()
	var k, v []byte
	n := 0
	it := m.Iterate()
	for it.Next(&k, &v) {
		n++
	}
	must(t, it.Err())
	return n
}
