package nodeport

import (
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"testing"

	"github.com/svcproxy/svcproxy/pkg/pipeline/maglev"
	"github.com/svcproxy/svcproxy/pkg/proxy"
	"github.com/svcproxy/svcproxy/pkg/testing/netnstest"
)

// The ICMP types and codes the tests send.
const (
	icmpUnreach, icmpPortUnreach, icmpFragNeeded = 3, 3, 4
	icmpRedirect, icmpEcho                       = 5, 8
)

// icmpError is an Ethernet frame of an ICMP message (type, code, the
// header's second word rest) from src to dst with body, checksums valid.
func icmpError(src, dst netip.Addr, typ, code byte, rest uint32, body []byte) []byte {
	b := make([]byte, 14+20+8+len(body))
	binary.BigEndian.PutUint16(b[12:], 0x0800)
	ip := b[14:34]
	ip[0], ip[8], ip[9] = 0x45, 64, 1
	binary.BigEndian.PutUint16(ip[2:], uint16(len(b)-14))
	s, d := src.As4(), dst.As4()
	copy(ip[12:], s[:])
	copy(ip[16:], d[:])
	binary.BigEndian.PutUint16(ip[10:], ^sum16(0, ip))
	msg := b[34:]
	msg[0], msg[1] = typ, code
	binary.BigEndian.PutUint32(msg[4:], rest)
	copy(msg[8:], body)
	binary.BigEndian.PutUint16(msg[2:], ^sum16(0, msg))
	return b
}

// tcShot is TC_ACT_SHOT.
const tcShot = 2

// ipPacket is the IPv4 packet of an Ethernet frame.
func ipPacket(frame []byte) []byte { return frame[14:] }

// icmpCase is an ICMP error run through a program and what must leave it.
type icmpCase struct {
	what    string
	prog    string
	in      *net.Interface
	err     []byte
	verdict uint32
	src     netip.Addr
	dst     netip.Addr
	quote   []byte
}

// check runs the case and fails unless the error left with the verdict,
// from src to dst, one hop less where forwarded, of the same type, code and
// second word, quoting quote, all checksums valid.
func (c icmpCase) check(t *testing.T, r *xdpRig) {
	t.Helper()
	v, out := r.runProg(t, c.prog, c.in, slices.Clone(c.err))
	if v != c.verdict {
		t.Fatalf("%s: verdict %d, want %d", c.what, v, c.verdict)
	}
	src, dst, typ, code, quote := icmpOf(t, c.what, out)
	if src != c.src || dst != c.dst {
		t.Errorf("%s: left %v → %v, want %v → %v", c.what, src, dst, c.src, c.dst)
	}
	if typ != c.err[34] || code != c.err[35] || string(out[38:42]) != string(c.err[38:42]) {
		t.Errorf("%s: type, code or second word changed: %x, was %x", c.what, out[34:42], c.err[34:42])
	}
	ttl := c.err[14+8]
	if c.verdict == tcRedirect {
		ttl--
	}
	if out[14+8] != ttl {
		t.Errorf("%s: left with TTL %d, want %d", c.what, out[14+8], ttl)
	}
	if string(quote) != string(c.quote) {
		t.Errorf("%s: quotes\n %x\nwant\n %x", c.what, quote, c.quote)
	}
}

// TestKernelICMPErrorsOfForwardedFlows: for a flow forwarded to an
// endpoint on another node (masqueraded), an ICMP error from the
// endpoint's side about a packet the node sent there (fragmentation
// needed from a router on the way, with a whole or a minimal quote)
// reaches the client from the node port's address, quoting the packet as
// the client sent it: the Service's address and port, the client's L4
// checksum; an error from the client's side about the node port's answer
// (port unreachable) reaches the endpoint from the masquerade address,
// quoting its answer as it sent it. Both are forwarded, one hop less.
func TestKernelICMPErrorsOfForwardedFlows(t *testing.T) {
	r := newXDPRig(t, "")
	router := netip.MustParseAddr("198.18.6.254")
	for _, protocol := range []proxy.Protocol{proxy.TCP, proxy.UDP} {
		t.Run(string(protocol), func(t *testing.T) {
			proto := protoNumbers[protocol]
			r.sync(t, port("web", protocol, 30080, ep(r.epC, 8080)))
			must(t, clearCT(r.p))
			f := maglev.Flow{Src: r.client, Dst: r.nodeIP, SrcPort: 40001, DstPort: 30080, Protocol: proto}
			first := checksummed(f, tcpSYN, false)
			v, sent := r.runTC(t, r.a0, slices.Clone(first))
			if v != tcRedirect || tupleDst(sent) != netip.AddrPortFrom(r.epC, 8080) {
				t.Fatalf("the first packet: verdict %d, to %v", v, tupleDst(sent))
			}
			// As the client sent it, the TTL the quote has (one less).
			asSent := ipPacket(withTTL(first, 63))
			for _, q := range []struct{ n, pad int }{{len(ipPacket(sent)), 0}, {28, 0}, {28, 12}} {
				// A frame's padding is no part of the quote.
				err := append(icmpError(router, r.nodeIP, icmpUnreach, icmpFragNeeded, 1400, ipPacket(sent)[:q.n]), make([]byte, q.pad)...)
				r.runCase(t, icmpCase{what: fmt.Sprintf("fragmentation needed quoting %d bytes, %d of padding", q.n, q.pad),
					prog: "np_ingress", in: r.c0, err: err, verdict: tcRedirect, src: r.nodeIP, dst: r.client, quote: asSent[:q.n]})
			}
			back := checksummed(answer(sent, proto), tcpSYN|tcpACK, false)
			v, got := r.runTC(t, r.c0, slices.Clone(back))
			if v != tcRedirect {
				t.Fatalf("the endpoint's answer: verdict %d", v)
			}
			r.runCase(t, icmpCase{what: "port unreachable from the client", prog: "np_ingress", in: r.a0,
				err:     icmpError(r.client, r.nodeIP, icmpUnreach, icmpPortUnreach, 0, ipPacket(got)[:28]),
				verdict: tcRedirect, src: r.nodeIP, dst: r.epC, quote: ipPacket(withTTL(back, 63))[:28]})
		})
	}
}

func (r *xdpRig) runCase(t *testing.T, c icmpCase) {
	t.Helper()
	t.Run(c.what, func(t *testing.T) { c.check(t, r) })
}

// TestKernelICMPErrorsOfLocalFlows: for a flow to an endpoint on this node,
// the endpoint's port unreachable (or the stack's error about a packet it
// forwarded there), leaving by a node interface, reaches the client from
// the Service's address quoting the datagram as the client sent it; an
// error from the client's side about the endpoint's translated answer goes
// up the stack to the endpoint, quoting the answer as it sent it. A
// redirect about the flow is dropped, as the kernel's conntrack drops one
// about a NATed flow. An error about no flow of the table, and an ICMP
// message that is no error, pass as they came, both ways.
func TestKernelICMPErrorsOfLocalFlows(t *testing.T) {
	r := newXDPRig(t, "")
	// A link of the node's own, no node interface: the pods' side.
	must(t, netnstest.Veth(r.node, "pods0", r.node, "pods1"))
	must(t, r.node.AddAddr("pods0", netip.MustParsePrefix("198.18.7.1/24")))
	pod := netip.MustParseAddr("198.18.7.9")
	r.sync(t, port("dns", proxy.UDP, 30053, ep(pod, 5353)))
	f := maglev.Flow{Src: r.client, Dst: r.nodeIP, SrcPort: 40002, DstPort: 30053, Protocol: 17}
	first := checksummed(f, 0, false)
	v, sent := r.runTC(t, r.a0, slices.Clone(first))
	if v != 0 || tupleDst(sent) != netip.AddrPortFrom(pod, 5353) {
		t.Fatalf("the first datagram: verdict %d, to %v; want TC_ACT_OK to the local endpoint", v, tupleDst(sent))
	}
	r.runCase(t, icmpCase{what: "the endpoint's port unreachable", prog: "np_egress", in: r.a0,
		err:     icmpError(pod, r.client, icmpUnreach, icmpPortUnreach, 0, ipPacket(sent)[:28]),
		verdict: 0, src: r.nodeIP, dst: r.client, quote: ipPacket(first)[:28]})
	back := checksummed(answer(sent, 17), 0, false)
	_, got := r.runProg(t, "np_egress", r.a0, slices.Clone(back))
	r.runCase(t, icmpCase{what: "port unreachable from the client", prog: "np_ingress", in: r.a0,
		err:     icmpError(r.client, r.nodeIP, icmpUnreach, icmpPortUnreach, 0, ipPacket(got)[:28]),
		verdict: 0, src: r.client, dst: pod, quote: ipPacket(back)[:28]})

	redirect := icmpError(r.client, r.nodeIP, icmpRedirect, 1, 0, ipPacket(got)[:28])
	if v, _ := r.runProg(t, "np_ingress", r.a0, redirect); v != tcShot {
		t.Errorf("a redirect about the flow: verdict %d, want TC_ACT_SHOT (%d)", v, tcShot)
	}

	other := checksummed(maglev.Flow{Src: r.client, Dst: r.nodeIP, SrcPort: 40003, DstPort: 30053, Protocol: 17}, 0, false)
	for _, c := range []struct {
		what string
		pkt  []byte
	}{
		{"an error about no flow", icmpError(r.client, r.nodeIP, icmpUnreach, icmpPortUnreach, 0, ipPacket(other)[:28])},
		{"an echo request", icmpError(r.client, r.nodeIP, icmpEcho, 0, 1, ipPacket(sent)[:28])},
	} {
		for _, prog := range []string{"np_ingress", "np_egress"} {
			if v, out := r.runProg(t, prog, r.a0, slices.Clone(c.pkt)); v != 0 || string(out) != string(c.pkt) {
				t.Errorf("%s through %s: verdict %d, changed %v; want TC_ACT_OK, as it came", c.what, prog, v, string(out) != string(c.pkt))
			}
		}
	}
}

// TestKernelICMPErrorAfterTheReplyEntryWasEvicted: np_ct evicted the reply
// entry of a flow masqueraded to another node, its masquerade port still
// reserved: an error from the endpoint's side about the flow
// (fragmentation needed from a router) still reaches the client,
// translated, and the reply entry is made again, as the flow's next reply
// would make it.
func TestKernelICMPErrorAfterTheReplyEntryWasEvicted(t *testing.T) {
	r := newXDPRig(t, "")
	router := netip.MustParseAddr("198.18.6.254")
	r.sync(t, port("web", proxy.UDP, 30080, ep(r.epC, 8080)))
	must(t, clearCT(r.p))
	f := maglev.Flow{Src: r.client, Dst: r.nodeIP, SrcPort: 40001, DstPort: 30080, Protocol: 17}
	first := checksummed(f, 0, false)
	v, sent := r.runTC(t, r.a0, slices.Clone(first))
	if v != tcRedirect || tupleDst(sent) != netip.AddrPortFrom(r.epC, 8080) {
		t.Fatalf("the first packet: verdict %d, to %v", v, tupleDst(sent))
	}
	masq, _ := tuple(sent)
	reply := ctKey{Src: r.epC.As4(), Dst: masq.Addr().As4(), Sport: netPort(8080), Dport: netPort(masq.Port()), Proto: 17}
	must(t, r.p.kernel.coll.Maps[mapCT].Delete(reply))
	r.runCase(t, icmpCase{what: "fragmentation needed, the reply entry evicted", prog: "np_ingress", in: r.c0,
		err:     icmpError(router, r.nodeIP, icmpUnreach, icmpFragNeeded, 1400, ipPacket(sent)[:28]),
		verdict: tcRedirect, src: r.nodeIP, dst: r.client, quote: ipPacket(withTTL(first, 63))[:28]})
	var back ctVal
	if err := r.p.kernel.coll.Maps[mapCT].Lookup(reply, &back); err != nil || back.Reply == 0 {
		t.Errorf("the reply entry %+v after the error: %v; want it made again", back, err)
	}
}

// TestKernelICMPv6ErrorAfterTheReplyEntryWasEvicted is
// TestKernelICMPErrorAfterTheReplyEntryWasEvicted for IPv6, with packet
// too big.
func TestKernelICMPv6ErrorAfterTheReplyEntryWasEvicted(t *testing.T) {
	r := newRig6(t)
	router := netip.MustParseAddr("fd00:6::fe")
	r.sync6(t, port("web", proxy.UDP, 30080, ep(r.epC, 8080)))
	maps := r.p.kernel.coll.Maps
	must(t, clearMap[ctKeyOf[[16]byte], ctValOf[[16]byte]](maps[maps6.ct]))
	f := maglev.Flow{Src: r.client, Dst: r.nodeIP, SrcPort: 40001, DstPort: 30080, Protocol: 17}
	v, sent := r.runTC(t, r.a0, packet6(f, 0))
	masq, to, _ := tuple6(sent)
	if v != tcRedirect || to != netip.AddrPortFrom(r.epC, 8080) {
		t.Fatalf("the first packet: verdict %d, to %v", v, to)
	}
	reply := ctKeyOf[[16]byte]{Src: r.epC.As16(), Dst: masq.Addr().As16(), Sport: netPort(8080), Dport: netPort(masq.Port()), Proto: 17}
	must(t, maps[maps6.ct].Delete(reply))
	verdict, out := r.runTC(t, r.c0, icmp6Error(router, r.nodeIP, 2, 1280, sent[14:]))
	if verdict != tcRedirect || out[14+6] != 58 {
		t.Fatalf("packet too big, the reply entry evicted: verdict %d, next header %d; want it forwarded", verdict, out[14+6])
	}
	ip := out[14:]
	from, dst := netip.AddrFrom16([16]byte(ip[8:24])), netip.AddrFrom16([16]byte(ip[24:40]))
	qsrc, qdst, _ := tuple6(append(make([]byte, 14), ip[48:]...))
	if from != r.nodeIP || dst != r.client || qsrc != netip.AddrPortFrom(r.client, 40001) || qdst != netip.AddrPortFrom(r.nodeIP, 30080) {
		t.Errorf("left %v → %v quoting %v → %v; want %v → %v quoting the client's datagram to the node port",
			from, dst, qsrc, qdst, r.nodeIP, r.client)
	}
	if s := l4Sum6(out); s != 0xffff {
		t.Errorf("ICMPv6 checksum invalid (sum %#x)", s)
	}
	var back ctValOf[[16]byte]
	if err := maps[maps6.ct].Lookup(reply, &back); err != nil || back.Reply == 0 {
		t.Errorf("the reply entry %+v after the error: %v; want it made again", back, err)
	}
}
