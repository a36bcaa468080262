package nodeport

import (
	"time"

	"encoding/binary"
	"net/netip"
	"testing"

	"github.com/cilium/ebpf"

	"github.com/svcproxy/svcproxy/pkg/pipeline/maglev"
	"github.com/svcproxy/svcproxy/pkg/proxy"
	"github.com/svcproxy/svcproxy/pkg/testing/netnstest"
)

// The tests here run the programs' direct server return (DSR) on crafted
// packets (BPF_PROG_RUN) in an xdpRig's node: as the node a client's
// packet arrives at, which tunnels it to the endpoint's node, and as that
// node, which decapsulates it. The maps' DSR contents are written here
// directly, as the render would.

var (
	// dsrPeer is a peer node, on c0's link.
	dsrPeer = netip.MustParseAddr("198.18.6.2")
	// dsrRemote is an endpoint on dsrPeer, dsrLocal one on the rig's
	// node (behind pod0).
	dsrRemote = netip.MustParseAddr("198.19.2.5")
	dsrLocal  = netip.MustParseAddr("198.19.1.5")
)

// The group of the rig's frontends of NP_SCOPE_TUNNEL, and
// NP_STAT_DSR_NO_FLOW.
const (
	dsrInGroup        = 0xd5a
	progStatDSRNoFlow = 1
)

// newDSRRig is an xdpRig whose node also has a local endpoints' link,
// pod0 (a veth into a namespace of its own, where np_devices does not
// reach), and knows dsrPeer as a peer.
func newDSRRig(t *testing.T) *xdpRig {
	r := newXDPRig(t, AccelerationDisabled)
	pods, err := netnstest.New(t).NewNS("pods")
	must(t, err)
	must(t, netnstest.Veth(r.node, "pod0", pods, "eth0"))
	must(t, r.node.AddAddr("pod0", netip.MustParsePrefix("198.19.1.1/24")))
	return r
}

// dsrSync syncs the rig with an external IP's service port (vip:80) whose
// endpoint is ep, then gives its frontend NP_F_DSR and ep's tunnel (when
// tunnel is valid), and this node's peer and its frontends of
// NP_SCOPE_TUNNEL (vip:80 and node port 30080 on any address) to
// dsrLocal:8080.
func (r *xdpRig) dsrSync(t *testing.T, proto proxy.Protocol, ep, tunnel netip.Addr) {
	t.Helper()
	r.sync(t, external(proto, ep4(ep)))
	must(t, clearCT(r.p))
	maps := r.p.kernel.coll.Maps
	pn := protoNumbers[proto]
	fk := svcKey{Addr: vip.As4(), Port: netPort(80), Proto: pn}
	var sv svcVal
	must(t, maps[mapServices].Lookup(fk, &sv))
	sv.Flags |= flagDSR
	must(t, maps[mapServices].Update(fk, sv, ebpf.UpdateExist))
	if tunnel.IsValid() {
		must(t, maps[mapTunnels].Update(ep.As4(), tunnelVal{Node: tunnel.As4()}, ebpf.UpdateAny))
	}
	must(t, maps[mapPeers].Update(dsrPeer.As4(), peerVal(1), ebpf.UpdateAny))
	must(t, maps[mapBackends].Update(beKey{ID: dsrInGroup}, endpointVal[[4]byte](ep4(dsrLocal)), ebpf.UpdateAny))
	in := svcVal{ID: dsrInGroup, Count: 1}
	for _, k := range []svcKey{
		{Addr: vip.As4(), Port: netPort(80), Proto: pn, Scope: scopeTunnel},
		{Port: netPort(30080), Proto: pn, Scope: scopeTunnel},
	} {
		must(t, maps[mapServices].Update(k, in, ebpf.UpdateAny))
	}
}

func ep4(ip netip.Addr) proxy.Endpoint { return ep(ip, 8080) }

// clientPacket is a client's packet of f with valid checksums, TOS 0x10
// and DF set (the outer header copies both).
func clientPacket(f maglev.Flow, flags byte) []byte {
	b := checksummed(f, flags, false)
	ip := b[14:34]
	ip[1], ip[6] = 0x10, 0x40
	setIPSum(ip)
	return b
}

func setIPSum(ip []byte) {
	ip[10], ip[11] = 0, 0
	binary.BigEndian.PutUint16(ip[10:], ^sum16(0, ip))
}

// ipip is frame inside an IPIP header from src to dst with the given TOS
// and fragment word, TTL 64, valid checksum.
func ipip(src, dst netip.Addr, tos byte, frag uint16, frame []byte) []byte {
	inner := frame[14:]
	b := make([]byte, 14+20+len(inner))
	copy(b, frame[:14])
	ip := b[14:34]
	ip[0], ip[1], ip[8], ip[9] = 0x45, tos, 64, 4
	binary.BigEndian.PutUint16(ip[2:], uint16(20+len(inner)))
	binary.BigEndian.PutUint16(ip[6:], frag)
	s, d := src.As4(), dst.As4()
	copy(ip[12:], s[:])
	copy(ip[16:], d[:])
	setIPSum(ip)
	copy(b[34:], inner)
	return b
}

// hopLess is frame with one hop less and its IPv4 checksum made again.
func hopLess(frame []byte) []byte {
	b := append([]byte(nil), frame...)
	b[14+8]--
	setIPSum(b[14:34])
	return b
}

func (r *xdpRig) ct(t *testing.T, f maglev.Flow) (ctVal, bool) {
	t.Helper()
	k := ctKey{Src: f.Src.As4(), Dst: f.Dst.As4(), Sport: netPort(f.SrcPort), Dport: netPort(f.DstPort), Proto: f.Protocol}
	var v ctVal
	err := r.p.kernel.coll.Maps[mapCT].Lookup(k, &v)
	return v, err == nil
}

func (r *xdpRig) dsrNoFlow(t *testing.T) uint64 {
	t.Helper()
	n, err := sumPerCPU(r.p.kernel.coll.Maps[mapStatsDSR], progStatDSRNoFlow)
	must(t, err)
	return n
}

// TestKernelDSRTunnelsToThePeer: a new flow to a DSR frontend whose
// endpoint is on a peer leaves in an IPIP header from this node to the
// peer (redirected), the client's packet inside unchanged but for one hop
// less; only the client's direction is recorded, as tunnelled, and the
// handshake's ACK (no reply ever passes here) makes it established.
func TestKernelDSRTunnelsToThePeer(t *testing.T) {
	r := newDSRRig(t)
	for _, proto := range []proxy.Protocol{proxy.TCP, proxy.UDP} {
		t.Run(string(proto), func(t *testing.T) {
			r.dsrSync(t, proto, dsrRemote, dsrPeer)
			f := maglev.Flow{Src: r.client, Dst: vip, SrcPort: 40001, DstPort: 80, Protocol: protoNumbers[proto]}
			syn := clientPacket(f, tcpSYN)
			verdict, out := r.runTC(t, r.a0, syn)
			if verdict != tcRedirect {
				t.Fatalf("verdict %d, want TC_ACT_REDIRECT (%d)", verdict, tcRedirect)
			}
			if want := ipip(r.nodeIP, dsrPeer, 0x10, 0x4000, hopLess(syn)); string(out) != string(want) {
				t.Errorf("sent\n%x\nwant (IPIP node→peer, TOS and DF copied, TTL 64; the packet one hop less)\n%x", out, want)
			}
			if s := sum16(0, out[14:34]); s != 0xffff {
				t.Errorf("outer header checksum invalid (sum %#x)", s)
			}
			v, ok := r.ct(t, f)
			want := ctVal{Src: r.nodeIP.As4(), Dst: dsrPeer.As4(), Sport: netPort(40001), Dport: netPort(80), At: ctAtTunnel}
			v.Seen = 0
			if !ok || v != want {
				t.Errorf("the flow's entry %+v (found %v), want %+v", v, ok, want)
			}
			if n := ctEntries(t, r.p); n != 1 {
				t.Errorf("%d entries in np_ct, want the client's direction only", n)
			}
			if proto != proxy.TCP {
				return
			}
			ack := clientPacket(f, tcpACK)
			verdict, out = r.runTC(t, r.a0, ack)
			if want := ipip(r.nodeIP, dsrPeer, 0x10, 0x4000, hopLess(ack)); verdict != tcRedirect || string(out) != string(want) {
				t.Errorf("the ACK: verdict %d, sent\n%x\nwant TC_ACT_REDIRECT of\n%x", verdict, out, want)
			}
			if v, _ := r.ct(t, f); v.State != 1 {
				t.Errorf("after the client's ACK the tunnelled flow is in state %d, want established (1)", v.State)
			}
		})
	}
}

// TestKernelDSRMasqueradesWithoutTunnel: a DSR frontend's flow is
// masqueraded as any other when its endpoint has no tunnel (its node does
// not decapsulate), or is the client itself (whose packets from its own
// address it would drop).
func TestKernelDSRMasqueradesWithoutTunnel(t *testing.T) {
	r := newDSRRig(t)
	for _, tc := range []struct {
		name     string
		ep, tun  netip.Addr
		out, via netip.Addr
	}{
		{"endpoint without a tunnel", r.epC, netip.Addr{}, r.epC, r.epC},
		{"endpoint is the client", r.client, dsrPeer, r.client, r.client},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r.dsrSync(t, proxy.TCP, tc.ep, tc.tun)
			f := maglev.Flow{Src: r.client, Dst: vip, SrcPort: 40002, DstPort: 80, Protocol: 6}
			verdict, out := r.runTC(t, r.a0, clientPacket(f, tcpSYN))
			if verdict != tcRedirect || out[14+9] != 6 {
				t.Fatalf("verdict %d, IP protocol %d: want TC_ACT_REDIRECT of the TCP packet", verdict, out[14+9])
			}
			src, dst := tuple(out)
			if src.Addr() != r.nodeIP || dst != netip.AddrPortFrom(tc.ep, 8080) {
				t.Errorf("sent %v → %v, want masqueraded from %v to %v:8080", src, dst, r.nodeIP, tc.ep)
			}
			if v, ok := r.ct(t, f); !ok || v.At == ctAtTunnel {
				t.Errorf("the flow's entry %+v (found %v), want a masqueraded one", v, ok)
			}
		})
	}
}

// TestKernelDSRLeavesClientsInsideTheClusterUntunnelled: a client in a prefix
// np_ranges holds under inClusterID (a pod's or a node's) is masqueraded
// to an endpoint a tunnel reaches: the endpoint's node would answer it
// where no tc program translates the answer. A client just outside the
// prefix is tunnelled. (The endpoint, given a tunnel to the peer, is
// reachable without it too.)
func TestKernelDSRLeavesClientsInsideTheClusterUntunnelled(t *testing.T) {
	r := newDSRRig(t)
	r.dsrSync(t, proxy.TCP, r.epC, dsrPeer)
	inside := netip.PrefixFrom(r.client, 32)
	must(t, r.p.kernel.coll.Maps[mapRanges].Update(sourceKey[[4]byte](inClusterID, inside), uint32(1), ebpf.UpdateAny))
	f := maglev.Flow{Src: r.client, Dst: vip, SrcPort: 40003, DstPort: 80, Protocol: 6}
	verdict, out := r.runTC(t, r.a0, clientPacket(f, tcpSYN))
	if verdict != tcRedirect || out[14+9] != 6 {
		t.Fatalf("verdict %d, IP protocol %d: want TC_ACT_REDIRECT of the TCP packet, not tunnelled", verdict, out[14+9])
	}
	if src, dst := tuple(out); src.Addr() != r.nodeIP || dst != netip.AddrPortFrom(r.epC, 8080) {
		t.Errorf("sent %v → %v, want masqueraded from %v to %v:8080", src, dst, r.nodeIP, r.epC)
	}
	must(t, r.p.kernel.coll.Maps[mapRanges].Delete(sourceKey[[4]byte](inClusterID, inside)))
	other := netip.PrefixFrom(r.client.Next(), 32)
	must(t, r.p.kernel.coll.Maps[mapRanges].Update(sourceKey[[4]byte](inClusterID, other), uint32(1), ebpf.UpdateAny))
	f.SrcPort++
	syn := clientPacket(f, tcpSYN)
	if verdict, out := r.runTC(t, r.a0, syn); verdict != tcRedirect || string(out) != string(ipip(r.nodeIP, dsrPeer, 0x10, 0x4000, hopLess(syn))) {
		t.Errorf("a client outside the prefixes: verdict %d, sent\n%x\nwant it tunnelled", verdict, out)
	}
}

// TestKernelDSRDecapsulatesToALocalEndpoint: an IPIP packet from a peer
// to this node's primary address, of a flow to a frontend of
// NP_SCOPE_TUNNEL, loses its outer header and goes up the stack to a local
// endpoint, the client's address kept (np_ingress_tun through
// np_progs_tun); both directions are flagged tunnelled, and the
// endpoint's reply leaves np_egress from the frontend.
func TestKernelDSRDecapsulatesToALocalEndpoint(t *testing.T) {
	r := newDSRRig(t)
	for _, tc := range []struct {
		name string
		dst  netip.Addr
		port uint16
	}{
		{"LB IP", vip, 80},
		{"peer's node port", dsrPeer, 30080},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r.dsrSync(t, proxy.TCP, dsrRemote, dsrPeer)
			f := maglev.Flow{Src: r.client, Dst: tc.dst, SrcPort: 40003, DstPort: tc.port, Protocol: 6}
			syn := clientPacket(f, tcpSYN)
			verdict, out := r.runTC(t, r.c0, ipip(dsrPeer, r.nodeIP, 0x10, 0x4000, syn))
			if verdict != tcOK {
				t.Fatalf("verdict %d, want TC_ACT_OK (%d)", verdict, tcOK)
			}
			if len(out) != len(syn) || out[14+9] != 6 {
				t.Fatalf("the packet after (%d bytes, protocol %d) is not the inner one (%d bytes, TCP)", len(out), out[14+9], len(syn))
			}
			checkSums(t, "the decapsulated packet", out, 6, false)
			if src, dst := tuple(out); src != netip.AddrPortFrom(r.client, 40003) || dst != netip.AddrPortFrom(dsrLocal, 8080) {
				t.Errorf("went up as %v → %v, want from the client to %v:8080", src, dst, dsrLocal)
			}
			fwd, ok := r.ct(t, f)
			if !ok || fwd.Flags != ctFlagTunneled || fwd.At != 0 {
				t.Errorf("the client's direction %+v (found %v), want at ingress, flagged tunnelled", fwd, ok)
			}
			reply := checksummed(answer(out, 6), tcpSYN|tcpACK, false)
			rev, ok := r.ct(t, answer(out, 6))
			if !ok || rev.Flags != ctFlagTunneled || rev.At != ctAtEgress {
				t.Errorf("the reply direction %+v (found %v), want at egress, flagged tunnelled", rev, ok)
			}
			verdict, back := r.runProg(t, "np_egress", r.a0, reply)
			if src, dst := tuple(back); verdict != tcOK || src != netip.AddrPortFrom(tc.dst, tc.port) || dst != netip.AddrPortFrom(r.client, 40003) {
				t.Errorf("np_egress on the reply: verdict %d, %v → %v, want TC_ACT_OK from the frontend %v:%d", verdict, src, dst, tc.dst, tc.port)
			}
			checkSums(t, "the reply", back, 6, false)
			ack := clientPacket(f, tcpACK)
			verdict, out = r.runTC(t, r.c0, ipip(dsrPeer, r.nodeIP, 0x10, 0x4000, ack))
			if _, dst := tuple(out); verdict != tcOK || dst != netip.AddrPortFrom(dsrLocal, 8080) {
				t.Errorf("the flow's next packet: verdict %d, to %v, want TC_ACT_OK to the endpoint", verdict, dst)
			}
		})
	}
}

// TestKernelDSRLeavesOtherIPIP: IPIP that is not a peer's DSR traffic
// (Calico's or flannel's between nodes, whose tunnel device takes it)
// passes unchanged: from an address that is no peer, to an address other
// than this node's primary one, or a packet between pods; a peer's DSR
// packet that no flow here takes is dropped, and counted.
func TestKernelDSRLeavesOtherIPIP(t *testing.T) {
	r := newDSRRig(t)
	r.dsrSync(t, proxy.TCP, dsrRemote, dsrPeer)
	toVIP := maglev.Flow{Src: r.client, Dst: vip, SrcPort: 40004, DstPort: 80, Protocol: 6}
	podToPod := maglev.Flow{Src: netip.MustParseAddr("198.19.2.9"), Dst: dsrLocal, SrcPort: 40005, DstPort: 8080, Protocol: 6}
	notAPeer := netip.MustParseAddr("198.18.6.3")
	for _, tc := range []struct {
		name string
		pkt  []byte
	}{
		{"from an address that is no peer", ipip(notAPeer, r.nodeIP, 0, 0x4000, clientPacket(toVIP, tcpSYN))},
		{"to another address of the node's", ipip(dsrPeer, netip.MustParseAddr("198.18.6.1"), 0, 0x4000, clientPacket(toVIP, tcpSYN))},
		{"between pods", ipip(dsrPeer, r.nodeIP, 0, 0x4000, clientPacket(podToPod, tcpSYN))},
		{"to a node port of an address that is no peer's", ipip(dsrPeer, r.nodeIP, 0, 0x4000,
			clientPacket(maglev.Flow{Src: r.client, Dst: notAPeer, SrcPort: 40006, DstPort: 30080, Protocol: 6}, tcpSYN))},
	} {
		t.Run(tc.name, func(t *testing.T) {
			verdict, out := r.runTC(t, r.c0, tc.pkt)
			if verdict != tcOK || string(out) != string(tc.pkt) {
				t.Errorf("verdict %d (want TC_ACT_OK), packet changed: %v", verdict, string(out) != string(tc.pkt))
			}
		})
	}
	before := r.dsrNoFlow(t)
	verdict, _ := r.runTC(t, r.c0, ipip(dsrPeer, r.nodeIP, 0, 0x4000, clientPacket(toVIP, tcpACK)))
	if verdict != tcShot {
		t.Errorf("a tunnelled ACK of no flow here: verdict %d, want TC_ACT_SHOT (%d)", verdict, tcShot)
	}
	if n := r.dsrNoFlow(t) - before; n != 1 {
		t.Errorf("the drop counted %d times in np_stats_dsr, want once", n)
	}
	if n := ctEntries(t, r.p); n != 0 {
		t.Errorf("%d entries in np_ct after packets no flow takes", n)
	}
}

// sized is a client's UDP datagram of f whose IPv4 packet is l3 bytes,
// DF set as df says, with valid checksums.
func sized(f maglev.Flow, l3 int, df bool) []byte {
	b := append(packetFlags(f, 0), make([]byte, l3-40)...)
	ip := b[14:34]
	binary.BigEndian.PutUint16(ip[2:], uint16(l3))
	if df {
		ip[6] = 0x40
	}
	setIPSum(ip)
	binary.BigEndian.PutUint16(b[34+4:], uint16(l3-20))
	binary.BigEndian.PutUint16(b[34+6:], ^l4Sum(b))
	return b
}

// TestKernelDSRTooBigForTheTunnel: a packet the tunnel's header would
// make too big for the link to the peer (MTU 1500) is answered with
// fragmentation needed, from the frontend, naming an MTU with room for
// that header, when the client set DF; without DF it is dropped and
// counted. One that fits with the header goes through the tunnel.
func TestKernelDSRTooBigForTheTunnel(t *testing.T) {
	r := newDSRRig(t)
	r.dsrSync(t, proxy.UDP, dsrRemote, dsrPeer)
	f := maglev.Flow{Src: r.client, Dst: vip, SrcPort: 40007, DstPort: 80, Protocol: 17}
	verdict, out := r.runTC(t, r.a0, sized(f, 1480, true))
	if verdict != tcRedirect || len(out) != 14+1500 || out[14+9] != 4 {
		t.Errorf("a packet that fits with the outer header: verdict %d, %d bytes, protocol %d; want TC_ACT_REDIRECT of 1,514 bytes of IPIP", verdict, len(out), out[14+9])
	}
	big := sized(f, 1481, true)
	verdict, out = r.runTC(t, r.a0, big)
	if verdict != tcRedirect || len(out) < 14+56 {
		t.Fatalf("a packet too big with DF: verdict %d, %d bytes; want TC_ACT_REDIRECT of an ICMP error", verdict, len(out))
	}
	ip, icmp := out[14:34], out[34:]
	src, dst := netip.AddrFrom4([4]byte(ip[12:16])), netip.AddrFrom4([4]byte(ip[16:20]))
	if ip[9] != 1 || src != vip || dst != r.client {
		t.Errorf("answered with protocol %d from %v to %v, want ICMP from the frontend %v to the client", ip[9], src, dst, vip)
	}
	if icmp[0] != 3 || icmp[1] != 4 || binary.BigEndian.Uint16(icmp[6:]) != 1480 {
		t.Errorf("ICMP type %d code %d, next-hop MTU %d; want fragmentation needed (3, 4), MTU 1480", icmp[0], icmp[1], binary.BigEndian.Uint16(icmp[6:]))
	}
	if string(icmp[8:36]) != string(big[14:42]) {
		t.Errorf("the error quotes %x, want the client's packet %x", icmp[8:36], big[14:42])
	}
	if s := sum16(0, icmp[:36]); s != 0xffff {
		t.Errorf("ICMP checksum invalid (sum %#x)", s)
	}
	before, err := sumPerCPU(r.p.kernel.coll.Maps[mapStatsDSR], 0)
	must(t, err)
	if verdict, _ := r.runTC(t, r.a0, sized(f, 1481, false)); verdict != tcShot {
		t.Errorf("a packet too big without DF: verdict %d, want TC_ACT_SHOT", verdict)
	}
	after, err := sumPerCPU(r.p.kernel.coll.Maps[mapStatsDSR], 0)
	must(t, err)
	if after-before != 1 {
		t.Errorf("counted %d times as too big, want once", after-before)
	}
}

// synACK is an endpoint's SYN-ACK of f announcing mss (its first option),
// with valid checksums.
func synACK(f maglev.Flow, mss uint16) []byte {
	b := append(packetFlags(f, tcpSYN|tcpACK), 2, 4, 0, 0)
	binary.BigEndian.PutUint16(b[14+2:], 44)
	setIPSum(b[14:34])
	b[34+12] = 6 << 4
	binary.BigEndian.PutUint16(b[54+2:], mss)
	binary.BigEndian.PutUint16(b[34+16:], ^l4Sum(b))
	return b
}

// egressOn runs np_egress over pkt leaving through out.
func (r *xdpRig) egressOn(t *testing.T, out int, pkt []byte) (uint32, []byte) {
	t.Helper()
	type skbOut struct {
		Len, PktType, Mark, QueueMapping, Protocol, VlanPresent, VlanTCI, VlanProto, Priority, IngressIfindex, Ifindex uint32
		Rest                                                                                                           [192 - 44]byte
	}
	opts := &ebpf.RunOptions{Data: pkt, DataOut: make([]byte, len(pkt)+64), Context: skbOut{Ifindex: uint32(out)},
		ContextOut: &skbOut{}}
	var ret uint32
	must(t, r.node.Do(func() (err error) {
		ret, err = r.p.kernel.coll.Programs["np_egress"].Run(opts)
		return err
	}))
	return ret, opts.DataOut
}

// TestKernelDSRClampsTheMSS: a local endpoint's SYN-ACK to a client whose
// flow a peer tunnelled here announces no more than the link's MTU (1500)
// leaves room for with the tunnel's header, its checksum kept valid; a
// smaller MSS, and the SYN-ACK of a flow that came directly, are left as
// they are.
func TestKernelDSRClampsTheMSS(t *testing.T) {
	r := newDSRRig(t)
	for _, tc := range []struct {
		name      string
		tunnelled bool
		mss, want uint16
	}{
		{"tunnelled flow", true, 1460, 1440},
		{"tunnelled flow, MSS smaller", true, 1400, 1400},
		{"direct flow", false, 1460, 1460},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r.dsrSync(t, proxy.TCP, dsrLocal, netip.Addr{})
			f := maglev.Flow{Src: r.client, Dst: vip, SrcPort: 40008, DstPort: 80, Protocol: 6}
			pkt, in := clientPacket(f, tcpSYN), r.a0
			if tc.tunnelled {
				pkt, in = ipip(dsrPeer, r.nodeIP, 0, 0x4000, pkt), r.c0
			}
			verdict, up := r.runTC(t, in, pkt)
			if _, dst := tuple(up); verdict != tcOK || dst != netip.AddrPortFrom(dsrLocal, 8080) {
				t.Fatalf("the SYN: verdict %d, to %v; want TC_ACT_OK to the local endpoint", verdict, dst)
			}
			verdict, out := r.egressOn(t, r.a0.Index, synACK(answer(up, 6), tc.mss))
			if verdict != tcOK || len(out) != 58 {
				t.Fatalf("np_egress on the SYN-ACK: verdict %d, %d bytes; want TC_ACT_OK, 58 bytes", verdict, len(out))
			}
			if got := binary.BigEndian.Uint16(out[54+2:]); got != tc.want {
				t.Errorf("the SYN-ACK announces MSS %d, want %d", got, tc.want)
			}
			checkSums(t, "the SYN-ACK", out, 6, false)
		})
	}
}

// TestKernelDSRLeavesErrorsAboutTunnelledFlows: an ICMP error about a
// tunnelled flow's reply (the client's port unreachable, quoting the
// frontend's datagram) passes unchanged: the flow's other direction is
// the peer's, and the entry here, the tunnel's, names no address the
// error could be translated to.
func TestKernelDSRLeavesErrorsAboutTunnelledFlows(t *testing.T) {
	r := newDSRRig(t)
	r.dsrSync(t, proxy.UDP, dsrRemote, dsrPeer)
	f := maglev.Flow{Src: r.client, Dst: vip, SrcPort: 40009, DstPort: 80, Protocol: 17}
	if verdict, _ := r.runTC(t, r.a0, clientPacket(f, 0)); verdict != tcRedirect {
		t.Fatalf("the flow's first datagram: verdict %d, want TC_ACT_REDIRECT", verdict)
	}
	reply := checksummed(answer(packetFlags(f, 0), 17), 0, false)
	icmp := icmpError(r.client, vip, 3, 3, 0, reply[14:14+28])
	if verdict, out := r.runTC(t, r.a0, append([]byte(nil), icmp...)); verdict != tcOK || string(out) != string(icmp) {
		t.Errorf("the client's port unreachable: verdict %d (want TC_ACT_OK), changed: %v", verdict, string(out) != string(icmp))
	}
}

// TestKernelDSRKeepsAFlowRefreshedAfterTheClockRead: another CPU may
// refresh an entry between this CPU's clock read and its lookup, so that
// the entry's time is ahead of the program's now. Such an entry is fresh,
// not centuries old: a tunnel flow, which has no second entry to keep it,
// must go on through the tunnel rather than be deleted and its next packet
// left to the stack.
func TestKernelDSRKeepsAFlowRefreshedAfterTheClockRead(t *testing.T) {
	r := newDSRRig(t)
	r.dsrSync(t, proxy.TCP, dsrRemote, dsrPeer)
	f := maglev.Flow{Src: r.client, Dst: vip, SrcPort: 40002, DstPort: 80, Protocol: protoNumbers[proxy.TCP]}
	if verdict, _ := r.runTC(t, r.a0, clientPacket(f, tcpSYN)); verdict != tcRedirect {
		t.Fatalf("the SYN: verdict %d, want TC_ACT_REDIRECT (%d)", verdict, tcRedirect)
	}
	v, ok := r.ct(t, f)
	if !ok {
		t.Fatal("no entry for the tunnelled flow")
	}
	now, err := monotonicNow()
	must(t, err)
	v.Seen = now + uint64(time.Second)
	k := ctKey{Src: f.Src.As4(), Dst: f.Dst.As4(), Sport: netPort(f.SrcPort), Dport: netPort(f.DstPort), Proto: f.Protocol}
	must(t, r.p.kernel.coll.Maps[mapCT].Put(k, v))
	ack := clientPacket(f, tcpACK)
	verdict, out := r.runTC(t, r.a0, ack)
	if want := ipip(r.nodeIP, dsrPeer, 0x10, 0x4000, hopLess(ack)); verdict != tcRedirect || string(out) != string(want) {
		t.Errorf("the ACK after a refresh ahead of the clock: verdict %d, want TC_ACT_REDIRECT (%d) through the tunnel", verdict, tcRedirect)
	}
	if _, ok := r.ct(t, f); !ok {
		t.Error("the tunnelled flow's entry was deleted as expired")
	}
}
