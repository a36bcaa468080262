package nodeport

import (
	"bytes"
	"context"
	"encoding/binary"
	"net/netip"
	"testing"

	"github.com/svcproxy/svcproxy/pkg/pipeline/desired"
	"github.com/svcproxy/svcproxy/pkg/pipeline/maglev"
	"github.com/svcproxy/svcproxy/pkg/proxy"
	"github.com/svcproxy/svcproxy/pkg/testing/netnstest"
)

// The IPv6 path run on crafted packets (BPF_PROG_RUN): the xdpRig's shape
// with IPv6 addresses, a0 toward the client and one endpoint, c0 toward
// another, all neighbours static.

var plan6 = rigPlan{a0: netip.MustParsePrefix("fd00:5::1/64"), c0: netip.MustParsePrefix("fd00:6::1/64"),
	clients: netip.MustParsePrefix("fd00:9::/64"), client: netip.MustParseAddr("fd00:9::7"),
	epA: netip.MustParseAddr("fd00:5::9"), epC: netip.MustParseAddr("fd00:6::9")}

// newRig6 is an xdpRig whose addresses are IPv6, synced with IPv6 States
// (sync6).
func newRig6(t *testing.T) *xdpRig { return newRigOf(t, plan6, "") }

// stateOf6 is stateOf for IPv6.
func stateOf6(nodeIP netip.Addr, sps ...*desired.ServicePort) *desired.State {
	st := stateOf(nodeIP, sps...)
	st.Family = proxy.IPv6
	return st
}

func (r *xdpRig) sync6(t *testing.T, sps ...*desired.ServicePort) {
	t.Helper()
	must(t, r.node.Do(func() error {
		return r.p.Sync(context.Background(), stateOf6(r.nodeIP, sps...), proxy.FullSync)
	}))
}

// packet6 is an Ethernet frame of f over IPv6 (TCP with flags, or UDP),
// hop limit 64, with a valid L4 checksum.
func packet6(f maglev.Flow, flags byte) []byte {
	l4len := 20
	if f.Protocol == 17 {
		l4len = 8
	}
	b := make([]byte, 14+40+l4len)
	binary.BigEndian.PutUint16(b[12:], 0x86dd)
	ip := b[14:]
	ip[0] = 0x60
	binary.BigEndian.PutUint16(ip[4:], uint16(l4len))
	ip[6], ip[7] = f.Protocol, 64
	src, dst := f.Src.As16(), f.Dst.As16()
	copy(ip[8:], src[:])
	copy(ip[24:], dst[:])
	l4 := ip[40:]
	binary.BigEndian.PutUint16(l4, f.SrcPort)
	binary.BigEndian.PutUint16(l4[2:], f.DstPort)
	csumAt := 16
	if f.Protocol == 6 {
		binary.BigEndian.PutUint32(l4[4:], 1000)
		l4[12], l4[13] = 5<<4, flags
	} else {
		binary.BigEndian.PutUint16(l4[4:], uint16(l4len))
		csumAt = 6
	}
	binary.BigEndian.PutUint16(l4[csumAt:], ^l4Sum6(b))
	return b
}

// l4Sum6 is the one's complement sum of an IPv6 packet's L4 segment (or
// ICMPv6 message) and its pseudo-header, checksum field included: 0xffff
// when the checksum is valid.
func l4Sum6(b []byte) uint16 {
	ip := b[14:]
	n := int(binary.BigEndian.Uint16(ip[4:]))
	pseudo := make([]byte, 40)
	copy(pseudo, ip[8:40])
	binary.BigEndian.PutUint32(pseudo[32:], uint32(n))
	pseudo[39] = ip[6]
	return sum16(sum16(0, pseudo), ip[40:40+n])
}

// tuple6 is an IPv6 packet's addresses and ports, and its hop limit.
func tuple6(b []byte) (src, dst netip.AddrPort, hops byte) {
	ip := b[14:]
	return netip.AddrPortFrom(netip.AddrFrom16([16]byte(ip[8:24])), binary.BigEndian.Uint16(ip[40:])),
		netip.AddrPortFrom(netip.AddrFrom16([16]byte(ip[24:40])), binary.BigEndian.Uint16(ip[42:])), ip[7]
}

const tcOK = 0

// TestKernelIPv6NodePortMasqueraded: a TCP flow and a UDP flow from a
// client to the node's IPv6 node port reach the endpoint on another node
// from the node's IPv6 address and a masquerade port, one hop less, with
// a valid checksum, forwarded from here; the endpoint's answers go back to
// the client from the node port.
func TestKernelIPv6NodePortMasqueraded(t *testing.T) {
	r := newRig6(t)
	tcpPort := port("web", proxy.TCP, 30080, ep(r.epC, 8080))
	udpPort := port("dns", proxy.UDP, 30053, ep(r.epC, 5353))
	r.sync6(t, tcpPort, udpPort)
	for _, tc := range []struct {
		proto         uint8
		nodePort, epP uint16
		flags, answer byte
	}{{6, 30080, 8080, tcpSYN, tcpSYN | tcpACK}, {17, 30053, 5353, 0, 0}} {
		f := maglev.Flow{Src: r.client, Dst: r.nodeIP, SrcPort: 40000, DstPort: tc.nodePort, Protocol: tc.proto}
		ret, out := r.runTC(t, r.a0, packet6(f, tc.flags))
		src, dst, hops := tuple6(out)
		if ret != tcRedirect || src.Addr() != r.nodeIP || !MasqueradePort(src.Port()) ||
			dst != netip.AddrPortFrom(r.epC, tc.epP) || hops != 63 {
			t.Fatalf("proto %d: the client's first packet: verdict %d, %v -> %v (hop limit %d); want %d, %v:<masquerade port> -> %v:%d (63)",
				tc.proto, ret, src, dst, hops, tcRedirect, r.nodeIP, r.epC, tc.epP)
		}
		if s := l4Sum6(out); s != 0xffff {
			t.Errorf("proto %d: the translated packet's L4 checksum is invalid (sum %#x)", tc.proto, s)
		}
		reply := maglev.Flow{Src: r.epC, Dst: r.nodeIP, SrcPort: tc.epP, DstPort: src.Port(), Protocol: tc.proto}
		ret, back := r.runTC(t, r.c0, packet6(reply, tc.answer))
		bsrc, bdst, bhops := tuple6(back)
		if ret != tcRedirect || bsrc != netip.AddrPortFrom(r.nodeIP, tc.nodePort) ||
			bdst != netip.AddrPortFrom(r.client, 40000) || bhops != 63 {
			t.Errorf("proto %d: the endpoint's answer: verdict %d, %v -> %v (hop limit %d); want %d, %v:%d -> %v:40000 (63)",
				tc.proto, ret, bsrc, bdst, bhops, tcRedirect, r.nodeIP, tc.nodePort, r.client)
		}
		if s := l4Sum6(back); s != 0xffff {
			t.Errorf("proto %d: the answer's L4 checksum is invalid (sum %#x)", tc.proto, s)
		}
	}
}

// TestKernelIPv6ExternalLocalKeepsClient: externalTrafficPolicy Local
// (no masquerade) keeps the client's address toward the endpoint.
func TestKernelIPv6ExternalLocalKeepsClient(t *testing.T) {
	r := newRig6(t)
	sp := port("local", proxy.TCP, 30090, ep(r.epC, 8080))
	sp.ExternalLocal = true
	r.sync6(t, sp)
	f := maglev.Flow{Src: r.client, Dst: r.nodeIP, SrcPort: 40001, DstPort: 30090, Protocol: 6}
	ret, out := r.runTC(t, r.a0, packet6(f, tcpSYN))
	src, dst, _ := tuple6(out)
	if ret != tcRedirect || src != netip.AddrPortFrom(r.client, 40001) || dst != netip.AddrPortFrom(r.epC, 8080) {
		t.Fatalf("verdict %d, %v -> %v; want %d, %v:40001 -> %v:8080", ret, src, dst, tcRedirect, r.client, r.epC)
	}
	if s := l4Sum6(out); s != 0xffff {
		t.Errorf("L4 checksum invalid (sum %#x)", s)
	}
}

// TestKernelIPv6Refused: a node port without endpoints answers a TCP SYN
// with a RST (the SYN acknowledged) and a UDP datagram with ICMPv6 port
// unreachable quoting it, from the node port's address, back out of the
// link they came in on; a packet with no hop left for an endpoint on
// another node is answered with ICMPv6 time exceeded.
func TestKernelIPv6Refused(t *testing.T) {
	r := newRig6(t)
	r.sync6(t, port("closed", proxy.TCP, 30082), port("closedu", proxy.UDP, 30083),
		port("web", proxy.TCP, 30080, ep(r.epC, 8080)))
	syn := packet6(maglev.Flow{Src: r.client, Dst: r.nodeIP, SrcPort: 40002, DstPort: 30082, Protocol: 6}, tcpSYN)
	ret, out := r.runProg(t, "np_ingress", r.a0, syn)
	src, dst, _ := tuple6(out)
	ip := out[14:]
	tcp := ip[40:]
	if ret != tcRedirect || ip[6] != 6 || src != netip.AddrPortFrom(r.nodeIP, 30082) ||
		dst != netip.AddrPortFrom(r.client, 40002) || tcp[13] != tcpRST|tcpACK ||
		binary.BigEndian.Uint32(tcp[8:]) != 1001 {
		t.Errorf("SYN to a port without endpoints: verdict %d, next header %d, %v -> %v, flags %#x, ack %d; want a RST|ACK from the node port acknowledging 1001",
			ret, ip[6], src, dst, tcp[13], binary.BigEndian.Uint32(tcp[8:]))
	}
	if s := l4Sum6(out); s != 0xffff {
		t.Errorf("RST: TCP checksum invalid (sum %#x)", s)
	}
	dgram := packet6(maglev.Flow{Src: r.client, Dst: r.nodeIP, SrcPort: 40003, DstPort: 30083, Protocol: 17}, 0)
	checkICMP6(t, r, "datagram to a port without endpoints", dgram, 1, 4)
	last := packet6(maglev.Flow{Src: r.client, Dst: r.nodeIP, SrcPort: 40004, DstPort: 30080, Protocol: 6}, tcpSYN)
	last[14+7] = 1
	checkICMP6(t, r, "SYN with hop limit 1", last, 3, 0)
}

// checkICMP6 runs pkt through np_ingress and fails unless the answer is
// ICMPv6 of typ and code from the address pkt was sent to, quoting pkt's
// IPv6 header and 8 bytes of its L4 header, its checksum valid.
func checkICMP6(t *testing.T, r *xdpRig, what string, pkt []byte, typ, code byte) {
	t.Helper()
	sent := bytes.Clone(pkt)
	ret, out := r.runProg(t, "np_ingress", r.a0, pkt)
	ip := out[14:]
	from, to := netip.AddrFrom16([16]byte(ip[8:24])), netip.AddrFrom16([16]byte(ip[24:40]))
	if ret != tcRedirect || ip[6] != 58 || ip[40] != typ || ip[41] != code || from != r.nodeIP || to != r.client {
		t.Errorf("%s: verdict %d, next header %d, ICMPv6 %d/%d, %v -> %v; want %d, ICMPv6 %d/%d, %v -> %v",
			what, ret, ip[6], ip[40], ip[41], from, to, tcRedirect, typ, code, r.nodeIP, r.client)
		return
	}
	if q := ip[48 : 48+48]; !bytes.Equal(q, sent[14:14+48]) {
		t.Errorf("%s: the quote is\n% x\nwant\n% x", what, q, sent[14:14+48])
	}
	if s := l4Sum6(out); s != 0xffff {
		t.Errorf("%s: ICMPv6 checksum invalid (sum %#x)", what, s)
	}
}

// TestKernelIPv6ExtensionHeadersToStack: a packet whose IPv6 header is
// followed by an extension header (here hop-by-hop options before the
// TCP header) goes to the stack untouched, as an IPv4 packet with options
// does: the programs parse only TCP or UDP right after the IPv6 header.
func TestKernelIPv6ExtensionHeadersToStack(t *testing.T) {
	r := newRig6(t)
	r.sync6(t, port("web", proxy.TCP, 30080, ep(r.epC, 8080)))
	plain := packet6(maglev.Flow{Src: r.client, Dst: r.nodeIP, SrcPort: 40005, DstPort: 30080, Protocol: 6}, tcpSYN)
	// Hop-by-hop options (8 bytes: next header TCP, length 0, PadN).
	pkt := append(bytes.Clone(plain[:54]), append([]byte{6, 0, 1, 4, 0, 0, 0, 0}, plain[54:]...)...)
	pkt[14+6] = 0
	binary.BigEndian.PutUint16(pkt[14+4:], uint16(len(pkt)-54))
	sent := bytes.Clone(pkt)
	ret, out := r.runProg(t, "np_ingress", r.a0, pkt)
	if ret != tcOK || !bytes.Equal(out[:len(sent)], sent) {
		t.Errorf("a packet with a hop-by-hop header: verdict %d (want %d, to the stack), changed: %v", ret, tcOK, !bytes.Equal(out[:len(sent)], sent))
	}
	if n := ctEntries6(t, r.p); n != 0 {
		t.Errorf("%d IPv6 conntrack entries after it, want 0", n)
	}
}

// ctEntries6 counts the entries of np_ct6.
func ctEntries6(t *testing.T, p *Proxier) int {
	t.Helper()
	var (
		k ctKeyOf[[16]byte]
		v ctValOf[[16]byte]
		n int
	)
	it := p.kernel.coll.Maps[maps6.ct].Iterate()
	for it.Next(&k, &v) {
		n++
	}
	must(t, it.Err())
	return n
}

// TestKernelIPv6NodePortRealPackets (the kernel tests' rig, real sockets):
// TCP and UDP to node1's IPv6 node port reach the local endpoint with the
// client's address and the remote one masqueraded to node1's IPv6 address
// from a masquerade port, the client's connected sockets getting the
// answers from the node port; externalTrafficPolicy Local keeps the
// client's address; an IPv6 external IP without endpoints is refused (RST,
// ICMPv6), where without the programs its packets would end in node1's
// sink route.
func TestKernelIPv6NodePortRealPackets(t *testing.T) {
	r := newRig(t)
	a, b := ep(r.podA.IPv6, 8080), ep(r.podB.IPv6, 8080)
	local := port("local", proxy.TCP, 30082, a)
	local.ExternalLocal = true
	rejectTCP, rejectUDP := port("reject", proxy.TCP, 0), port("reject", proxy.UDP, 0)
	extIP := netip.MustParseAddr("fd00:18:100::1")
	rejectTCP.ExternalIPs, rejectUDP.ExternalIPs = []netip.Addr{extIP}, []netip.Addr{extIP}
	st := stateOf6(r.node1.IPv6, port("web", proxy.TCP, 30080, a, b), port("dns", proxy.UDP, 30081, a, b),
		local, rejectTCP, rejectUDP)
	p := r.proxier(t, "np")
	r.sync(t, p, st, proxy.RecoverySync)

	kept := func(ap netip.AddrPort) bool { return ap.Addr() == r.clientIP6 }
	masq := func(ap netip.AddrPort) bool { return ap.Addr() == r.node1.IPv6 && MasqueradePort(ap.Port()) }
	for _, tc := range []struct {
		proto proxy.Protocol
		port  uint16
	}{{proxy.TCP, 30080}, {proxy.UDP, 30081}} {
		dst := netip.AddrPortFrom(r.node1.IPv6, tc.port)
		seen := r.ask(t, tc.proto, dst, 24, map[string]func(netip.AddrPort) bool{"pod-a": kept, "pod-b": masq})
		t.Logf("24 %s requests to %v: %v", tc.proto, dst, seen)
		if seen["pod-a"] == 0 || seen["pod-b"] == 0 {
			t.Errorf("%s to %v reached %v, want the local and the remote endpoint", tc.proto, dst, seen)
		}
	}
	dst := netip.AddrPortFrom(r.node1.IPv6, 30082)
	if seen := r.ask(t, proxy.TCP, dst, 6, map[string]func(netip.AddrPort) bool{"pod-a": kept}); seen["pod-a"] != 6 {
		t.Errorf("externalTrafficPolicy Local: %v, want pod-a only", seen)
	}
	for _, proto := range []proxy.Protocol{proxy.TCP, proxy.UDP} {
		if got := r.outcome(proto, netip.AddrPortFrom(extIP, 80)); got != netnstest.Refused {
			t.Errorf("%s to [%v]:80 without endpoints: %s, want %s", proto, extIP, got, netnstest.Refused)
		}
	}
}

// TestKernelBothFamiliesSyncAtOnce: the families' syncers call one
// Proxier at once (each writes its own maps, the programs shared): both
// States end up in their maps, and an unchanged second round writes
// nothing. Run with -race, it also checks the Proxier's lock.
func TestKernelBothFamiliesSyncAtOnce(t *testing.T) {
	ns, pins := progNS(t)
	p := progProxier(t, pins, "np")
	st4 := stateOf(netip.MustParseAddr("198.18.0.11"), port("web", proxy.TCP, 30080, ep(netip.MustParseAddr("198.19.1.2"), 8080)))
	st6 := stateOf6(netip.MustParseAddr("fd00:18::11"), port("web", proxy.TCP, 30080, ep(netip.MustParseAddr("fd00:19::2"), 8080)))
	syncBoth := func() {
		errs := make(chan error, 2)
		for _, st := range []*desired.State{st4, st6} {
			go func() {
				errs <- ns.Do(func() error { return p.Sync(context.Background(), st, proxy.FullSync) })
			}()
		}
		must(t, <-errs)
		must(t, <-errs)
		if p.CanaryMissing() {
			t.Error("a pin is missing after both syncs")
		}
	}
	syncBoth()
	first := p.Writes()
	var v svcVal
	must(t, p.kernel.coll.Maps[maps4.services].Lookup(frontendKey[[4]byte](st4.NodeIPs[0], 30080, 6), &v))
	must(t, p.kernel.coll.Maps[maps6.services].Lookup(frontendKey[[16]byte](st6.NodeIPs[0], 30080, 6), &v))
	syncBoth()
	if n := p.Writes() - first; n != 0 {
		t.Errorf("an unchanged second round wrote %d entries, want 0", n)
	}
}

// icmp6Error is an Ethernet frame of an ICMPv6 error of typ from src to
// dst, its 4 bytes after the checksum rest, quoting quote; checksum valid.
func icmp6Error(src, dst netip.Addr, typ byte, rest uint32, quote []byte) []byte {
	b := make([]byte, 14+40+8+len(quote))
	binary.BigEndian.PutUint16(b[12:], 0x86dd)
	ip := b[14:]
	ip[0] = 0x60
	binary.BigEndian.PutUint16(ip[4:], uint16(8+len(quote)))
	ip[6], ip[7] = 58, 64
	s, d := src.As16(), dst.As16()
	copy(ip[8:], s[:])
	copy(ip[24:], d[:])
	ip[40] = typ
	binary.BigEndian.PutUint32(ip[44:], rest)
	copy(ip[48:], quote)
	binary.BigEndian.PutUint16(ip[42:], ^l4Sum6(b))
	return b
}

// TestKernelIPv6PacketTooBig: a router's packet too big about a UDP flow
// masqueraded to an endpoint on another node, sent to the node's
// masquerade address, is forwarded to the client from the node port's
// address, one hop less, its MTU kept, quoting the datagram as the client
// sent it (its checksum valid again), the ICMPv6 checksum valid.
func TestKernelIPv6PacketTooBig(t *testing.T) {
	r := newRig6(t)
	r.sync6(t, port("dns", proxy.UDP, 30053, ep(r.epC, 5353)))
	f := maglev.Flow{Src: r.client, Dst: r.nodeIP, SrcPort: 40000, DstPort: 30053, Protocol: 17}
	sent := packet6(f, 0)
	_, out := r.runTC(t, r.a0, bytes.Clone(sent))
	router := netip.MustParseAddr("fd00:6::fe")
	ptb := icmp6Error(router, r.nodeIP, 2, 1280, out[14:14+48])
	ret, got := r.runTC(t, r.c0, ptb)
	ip := got[14:]
	from, to := netip.AddrFrom16([16]byte(ip[8:24])), netip.AddrFrom16([16]byte(ip[24:40]))
	if ret != tcRedirect || ip[6] != 58 || ip[40] != 2 || from != r.nodeIP || to != r.client || ip[7] != 63 ||
		binary.BigEndian.Uint32(ip[44:]) != 1280 {
		t.Fatalf("packet too big: verdict %d, %v -> %v, next header %d, type %d, hop limit %d, MTU %d; want %d, %v -> %v, ICMPv6 type 2, 63, 1280",
			ret, from, to, ip[6], ip[40], ip[7], binary.BigEndian.Uint32(ip[44:]), tcRedirect, r.nodeIP, r.client)
	}
	if s := l4Sum6(got); s != 0xffff {
		t.Errorf("ICMPv6 checksum invalid (sum %#x)", s)
	}
	quote := ip[48 : 48+48]
	// The quote as the client sent it, but for the hop limit the router
	// saw (one less).
	want := bytes.Clone(sent[14 : 14+48])
	want[7] = 63
	if !bytes.Equal(quote, want) {
		t.Errorf("the quote is\n% x\nwant the client's datagram\n% x", quote, want)
	}
}

// TestKernelXDPPassesIPv6ToTC: np_xdp leaves IPv6 to tc, even a packet of
// a flow tc forwards out of a node interface (which np_xdp would send on
// for IPv4): it passes unchanged, and np_ingress translates it.
func TestKernelXDPPassesIPv6ToTC(t *testing.T) {
	r := newRigOf(t, plan6, AccelerationNative)
	r.sync6(t, port("web", proxy.TCP, 30080, ep(r.epC, 8080)))
	f := maglev.Flow{Src: r.client, Dst: r.nodeIP, SrcPort: 40000, DstPort: 30080, Protocol: 6}
	if ret, _ := r.runTC(t, r.a0, packet6(f, tcpSYN)); ret != tcRedirect {
		t.Fatalf("the client's SYN: tc verdict %d, want %d (forwarded to the endpoint on another node)", ret, tcRedirect)
	}
	ack := packet6(f, tcpACK)
	ret, out := r.runXDP(t, r.a0, bytes.Clone(ack))
	if ret != xdpPass || !bytes.Equal(out[:len(ack)], ack) {
		t.Errorf("the flow's ACK at XDP: verdict %d, changed %t; want XDP_PASS (%d), unchanged",
			ret, !bytes.Equal(out[:len(ack)], ack), xdpPass)
	}
	ret, out = r.runTC(t, r.a0, ack)
	if _, dst, _ := tuple6(out); ret != tcRedirect || dst != netip.AddrPortFrom(r.epC, 8080) {
		t.Errorf("the flow's ACK at tc: verdict %d to %v, want %d to [%v]:8080", ret, dst, tcRedirect, r.epC)
	}
}

// TestKernelIPv6ServedAfterClose: once the Proxier's descriptors are
// closed (svcproxy stopped or restarting), the pinned programs still
// translate IPv6: np_progs6, through which np_ingress reaches IPv6's
// programs, is pinned (the kernel empties a program array no user holds),
// so a node port keeps answering rather than passing to the stack; a
// restart adopts the array and points it at its own programs.
func TestKernelIPv6ServedAfterClose(t *testing.T) {
	r := newRig(t)
	p := r.proxier(t, "np")
	r.sync(t, p, stateOf6(r.node1.IPv6, port("web", proxy.TCP, 30080, ep(r.podA.IPv6, 8080))), proxy.RecoverySync)
	dst := netip.AddrPortFrom(r.node1.IPv6, 30080)
	kept := func(ap netip.AddrPort) bool { return ap.Addr() == r.clientIP6 }
	r.ask(t, proxy.TCP, dst, 2, map[string]func(netip.AddrPort) bool{"pod-a": kept})
	p.Close()
	if got := r.outcome(proxy.TCP, dst); got != netnstest.OK {
		t.Errorf("TCP to %v with the Proxier closed: %v, want answered by pod-a through the pinned programs", dst, got)
	}
	again := r.proxier(t, "np")
	r.sync(t, again, stateOf6(r.node1.IPv6, port("web", proxy.TCP, 30080, ep(r.podA.IPv6, 8080))), proxy.RecoverySync)
	r.ask(t, proxy.TCP, dst, 2, map[string]func(netip.AddrPort) bool{"pod-a": kept})
	if n := again.Writes(); n != 0 {
		t.Errorf("a restart with the same IPv6 State wrote %d entries, want 0", n)
	}
}
