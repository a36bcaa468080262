package nodeport

import (
	"encoding/binary"
	"net/netip"
	"testing"

	"github.com/cilium/ebpf"

	"github.com/svcproxy/svcproxy/pkg/pipeline/maglev"
	"github.com/svcproxy/svcproxy/pkg/proxy"
	"github.com/svcproxy/svcproxy/pkg/testing/netnstest"
)

// The DSR tests of dsr_prog_test.go for IPv6 (IPv6 in IPv6), in an IPv6
// xdpRig.

var (
	vip6       = netip.MustParseAddr("fd00:18:100::7")
	dsrPeer6   = netip.MustParseAddr("fd00:6::2")
	dsrRemote6 = netip.MustParseAddr("fd00:19:2::5")
	dsrLocal6  = netip.MustParseAddr("fd00:19:1::5")
)

type svcKey6 = svcKeyOf[[16]byte]

// newDSRRig6 is newDSRRig for IPv6.
func newDSRRig6(t *testing.T) *xdpRig {
	r := newRig6(t)
	pods, err := netnstest.New(t).NewNS("pods")
	must(t, err)
	must(t, netnstest.Veth(r.node, "pod0", pods, "eth0"))
	must(t, r.node.AddAddr("pod0", netip.MustParsePrefix("fd00:19:1::1/64")))
	return r
}

// dsrSync6 is dsrSync for IPv6: vip6:80 to ep, tunnelled to dsrPeer6,
// and the frontends of NP_SCOPE_TUNNEL to dsrLocal6:8080.
func (r *xdpRig) dsrSync6(t *testing.T, proto proxy.Protocol, ep netip.Addr) {
	t.Helper()
	sp := port("web", proto, 0, ep4(ep))
	sp.ExternalIPs = []netip.Addr{vip6}
	r.sync6(t, sp)
	maps := r.p.kernel.coll.Maps
	must(t, clearMap[ctKeyOf[[16]byte], ctValOf[[16]byte]](maps[maps6.ct]))
	pn := protoNumbers[proto]
	fk := svcKey6{Addr: vip6.As16(), Port: netPort(80), Proto: pn}
	var sv svcVal
	must(t, maps[maps6.services].Lookup(fk, &sv))
	sv.Flags |= flagDSR
	must(t, maps[maps6.services].Update(fk, sv, ebpf.UpdateExist))
	must(t, maps[maps6.tunnels].Update(ep.As16(), tunnelVal6{Node: dsrPeer6.As16()}, ebpf.UpdateAny))
	must(t, maps[maps6.peers].Update(dsrPeer6.As16(), peerVal(1), ebpf.UpdateAny))
	must(t, maps[maps6.backends].Update(beKey{ID: dsrInGroup}, endpointVal[[16]byte](ep4(dsrLocal6)), ebpf.UpdateAny))
	must(t, maps[maps6.services].Update(svcKey6{Addr: vip6.As16(), Port: netPort(80), Proto: pn, Scope: scopeTunnel},
		svcVal{ID: dsrInGroup, Count: 1}, ebpf.UpdateAny))
}

// ip6ip6 is frame inside an outer IPv6 header from src to dst (traffic
// class and flow label the inner one's, hop limit 64).
func ip6ip6(src, dst netip.Addr, frame []byte) []byte {
	inner := frame[14:]
	b := make([]byte, 14+40+len(inner))
	copy(b, frame[:14])
	ip := b[14:54]
	copy(ip[:4], inner[:4])
	binary.BigEndian.PutUint16(ip[4:], uint16(len(inner)))
	ip[6], ip[7] = 41, 64
	s, d := src.As16(), dst.As16()
	copy(ip[8:], s[:])
	copy(ip[24:], d[:])
	copy(b[54:], inner)
	return b
}

// withClass gives an IPv6 frame a traffic class and flow label.
func withClass(b []byte) []byte {
	copy(b[14:18], []byte{0x61, 0x23, 0x45, 0x67})
	return b
}

// TestKernelDSR6TunnelsToThePeer: TestKernelDSRTunnelsToThePeer for IPv6.
func TestKernelDSR6TunnelsToThePeer(t *testing.T) {
	r := newDSRRig6(t)
	r.dsrSync6(t, proxy.TCP, dsrRemote6)
	f := maglev.Flow{Src: r.client, Dst: vip6, SrcPort: 40001, DstPort: 80, Protocol: 6}
	syn := withClass(packet6(f, tcpSYN))
	verdict, out := r.runTC(t, r.a0, append([]byte(nil), syn...))
	inner := append([]byte(nil), syn...)
	inner[14+7]--
	if want := ip6ip6(r.nodeIP, dsrPeer6, inner); verdict != tcRedirect || string(out) != string(want) {
		t.Errorf("verdict %d (want TC_ACT_REDIRECT), sent\n%x\nwant (IPv6 in IPv6 node→peer, class and label copied, hop limit 64; the packet one hop less)\n%x", verdict, out, want)
	}
	var v ctValOf[[16]byte]
	k := ctKeyOf[[16]byte]{Src: r.client.As16(), Dst: vip6.As16(), Sport: netPort(40001), Dport: netPort(80), Proto: 6}
	must(t, r.p.kernel.coll.Maps[maps6.ct].Lookup(k, &v))
	if v.At != ctAtTunnel || netipOf(v.Src) != r.nodeIP || netipOf(v.Dst) != dsrPeer6 {
		t.Errorf("the flow's entry %+v, want tunnelled from the node to the peer", v)
	}
	r.runTC(t, r.a0, packet6(f, tcpACK))
	must(t, r.p.kernel.coll.Maps[maps6.ct].Lookup(k, &v))
	if v.State != 1 {
		t.Errorf("after the client's ACK the tunnelled flow is in state %d, want established (1)", v.State)
	}
}

// TestKernelDSR6LeavesClientsInsideTheClusterUntunnelled:
// TestKernelDSRLeavesClientsInsideTheClusterUntunnelled for IPv6.
func TestKernelDSR6LeavesClientsInsideTheClusterUntunnelled(t *testing.T) {
	r := newDSRRig6(t)
	r.dsrSync6(t, proxy.TCP, r.epC)
	inside := netip.PrefixFrom(r.client, 64).Masked()
	must(t, r.p.kernel.coll.Maps[maps6.ranges].Update(sourceKey[[16]byte](inClusterID, inside), uint32(1), ebpf.UpdateAny))
	f := maglev.Flow{Src: r.client, Dst: vip6, SrcPort: 40003, DstPort: 80, Protocol: 6}
	verdict, out := r.runTC(t, r.a0, packet6(f, tcpSYN))
	if verdict != tcRedirect || out[14+6] != 6 {
		t.Fatalf("verdict %d, next header %d: want TC_ACT_REDIRECT of the TCP packet, not tunnelled", verdict, out[14+6])
	}
	if src, dst, _ := tuple6(out); src.Addr() != r.nodeIP || dst != netip.AddrPortFrom(r.epC, 8080) {
		t.Errorf("sent %v → %v, want masqueraded from %v to %v:8080", src, dst, r.nodeIP, r.epC)
	}
}

// TestKernelDSR6DecapsulatesToALocalEndpoint:
// TestKernelDSRDecapsulatesToALocalEndpoint for IPv6, with the MSS clamp
// of the endpoint's SYN-ACK (1500 - 100).
func TestKernelDSR6DecapsulatesToALocalEndpoint(t *testing.T) {
	r := newDSRRig6(t)
	r.dsrSync6(t, proxy.TCP, dsrRemote6)
	f := maglev.Flow{Src: r.client, Dst: vip6, SrcPort: 40003, DstPort: 80, Protocol: 6}
	syn := packet6(f, tcpSYN)
	verdict, out := r.runTC(t, r.c0, ip6ip6(dsrPeer6, r.nodeIP, syn))
	src, dst, _ := tuple6(out)
	if verdict != tcOK || len(out) != len(syn) || src != netip.AddrPortFrom(r.client, 40003) || dst != netip.AddrPortFrom(dsrLocal6, 8080) {
		t.Fatalf("verdict %d, %d bytes, %v → %v; want TC_ACT_OK, the inner packet to %v:8080", verdict, len(out), src, dst, dsrLocal6)
	}
	if s := l4Sum6(out); s != 0xffff {
		t.Errorf("the decapsulated packet's L4 checksum is invalid (sum %#x)", s)
	}
	reply := append(packet6(maglev.Flow{Src: dsrLocal6, Dst: r.client, SrcPort: 8080, DstPort: 40003, Protocol: 6}, tcpSYN|tcpACK), 2, 4, 0x05, 0xb4)
	binary.BigEndian.PutUint16(reply[14+4:], 24)
	reply[54+12] = 6 << 4
	reply[54+16], reply[54+17] = 0, 0
	binary.BigEndian.PutUint16(reply[54+16:], ^l4Sum6(reply))
	verdict, back := r.egressOn(t, r.a0.Index, reply)
	bsrc, bdst, _ := tuple6(back)
	if verdict != tcOK || bsrc != netip.AddrPortFrom(vip6, 80) || bdst != netip.AddrPortFrom(r.client, 40003) {
		t.Errorf("np_egress on the SYN-ACK: verdict %d, %v → %v; want TC_ACT_OK from the frontend", verdict, bsrc, bdst)
	}
	if mss := binary.BigEndian.Uint16(back[74+2:]); mss != 1400 {
		t.Errorf("the SYN-ACK announces MSS %d, want 1400", mss)
	}
	if s := l4Sum6(back); s != 0xffff {
		t.Errorf("the SYN-ACK's L4 checksum is invalid (sum %#x)", s)
	}
	other := ip6ip6(netip.MustParseAddr("fd00:6::3"), r.nodeIP, packet6(f, tcpSYN))
	if verdict, out := r.runTC(t, r.c0, append([]byte(nil), other...)); verdict != tcOK || string(out) != string(other) {
		t.Errorf("IPv6 in IPv6 from an address that is no peer: verdict %d (want TC_ACT_OK), changed: %v", verdict, string(out) != string(other))
	}
}

// TestKernelDSR6TooBigForTheTunnel: a packet the outer header would make
// too big for the link (MTU 1500) is answered with packet too big, MTU
// 1460, from the frontend.
func TestKernelDSR6TooBigForTheTunnel(t *testing.T) {
	r := newDSRRig6(t)
	r.dsrSync6(t, proxy.UDP, dsrRemote6)
	f := maglev.Flow{Src: r.client, Dst: vip6, SrcPort: 40007, DstPort: 80, Protocol: 17}
	sized6 := func(l3 int) []byte {
		b := append(packet6(f, 0), make([]byte, l3-48)...)
		binary.BigEndian.PutUint16(b[14+4:], uint16(l3-40))
		binary.BigEndian.PutUint16(b[54+4:], uint16(l3-40))
		b[54+6], b[54+7] = 0, 0
		binary.BigEndian.PutUint16(b[54+6:], ^l4Sum6(b))
		return b
	}
	if verdict, out := r.runTC(t, r.a0, sized6(1460)); verdict != tcRedirect || len(out) != 14+1500 || out[14+6] != 41 {
		t.Errorf("a packet that fits with the outer header: verdict %d, %d bytes; want TC_ACT_REDIRECT of 1,514 bytes of IPv6 in IPv6", verdict, len(out))
	}
	verdict, out := r.runTC(t, r.a0, sized6(1461))
	src, dst, _ := tuple6(out)
	if verdict != tcRedirect || out[14+6] != 58 || src.Addr() != vip6 || dst.Addr() != r.client {
		t.Fatalf("a packet too big: verdict %d, next header %d, %v → %v; want ICMPv6 from the frontend to the client", verdict, out[14+6], src, dst)
	}
	if icmp := out[54:]; icmp[0] != 2 || binary.BigEndian.Uint32(icmp[4:]) != 1460 {
		t.Errorf("ICMPv6 type %d, MTU %d; want packet too big (2), 1460", icmp[0], binary.BigEndian.Uint32(icmp[4:]))
	}
	if s := l4Sum6(out); s != 0xffff {
		t.Errorf("ICMPv6 checksum invalid (sum %#x)", s)
	}
}

// TestKernelDSR6LeavesErrorsAboutTunnelledFlows:
// TestKernelDSRLeavesErrorsAboutTunnelledFlows for IPv6.
func TestKernelDSR6LeavesErrorsAboutTunnelledFlows(t *testing.T) {
	r := newDSRRig6(t)
	r.dsrSync6(t, proxy.UDP, dsrRemote6)
	f := maglev.Flow{Src: r.client, Dst: vip6, SrcPort: 40009, DstPort: 80, Protocol: 17}
	if verdict, _ := r.runTC(t, r.a0, packet6(f, 0)); verdict != tcRedirect {
		t.Fatalf("the flow's first datagram: verdict %d, want TC_ACT_REDIRECT", verdict)
	}
	reply := packet6(maglev.Flow{Src: vip6, Dst: r.client, SrcPort: 80, DstPort: 40009, Protocol: 17}, 0)
	icmp := icmp6Error(r.client, vip6, 1, 0, reply[14:14+48])
	if verdict, out := r.runTC(t, r.a0, append([]byte(nil), icmp...)); verdict != tcOK || string(out) != string(icmp) {
		t.Errorf("the client's unreachable: verdict %d (want TC_ACT_OK), changed: %v", verdict, string(out) != string(icmp))
	}
}
