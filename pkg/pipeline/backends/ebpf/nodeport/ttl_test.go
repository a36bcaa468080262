package nodeport

import (
	"encoding/binary"
	"net"
	"net/netip"
	"slices"
	"testing"

	"github.com/svcproxy/svcproxy/pkg/pipeline/maglev"
	"github.com/svcproxy/svcproxy/pkg/proxy"
)

// withTTL is an Ethernet frame's copy with the IPv4 TTL ttl, its header
// checksum valid.
func withTTL(frame []byte, ttl byte) []byte {
	b := slices.Clone(frame)
	ip := b[14:34]
	ip[8] = ttl
	binary.BigEndian.PutUint16(ip[10:], 0)
	binary.BigEndian.PutUint16(ip[10:], ^sum16(0, ip))
	return b
}

// icmpOf is the ICMP error in frame: its outer source and destination,
// type and code, and quote; it fails unless the frame is one with valid
// IPv4 and ICMP checksums.
func icmpOf(t *testing.T, what string, frame []byte) (src, dst netip.Addr, typ, code byte, quote []byte) {
	t.Helper()
	if len(frame) < 14+20+8 || frame[14+9] != 1 {
		t.Fatalf("%s: not an ICMP message: %x", what, frame)
	}
	ip, msg := frame[14:34], frame[34:14+int(binary.BigEndian.Uint16(frame[16:]))]
	if s := sum16(0, ip); s != 0xffff {
		t.Errorf("%s: IPv4 header checksum invalid (sum %#x)", what, s)
	}
	if s := sum16(0, msg); s != 0xffff {
		t.Errorf("%s: ICMP checksum invalid (sum %#x)", what, s)
	}
	return netip.AddrFrom4([4]byte(ip[12:16])), netip.AddrFrom4([4]byte(ip[16:20])), msg[0], msg[1], msg[8:]
}

// TestKernelLastHop: a packet tc forwards out of a node interface (an
// endpoint on another node, and that flow's replies) loses a hop there
// (TestKernelXDPForwardsAsTC checks the count, through XDP and tc alike);
// one without a hop left is not forwarded but answered with ICMP time
// exceeded, as the kernel's forwarding would answer it: to its sender,
// from the address the sender talked to (the node port's, the masquerade
// address), quoting the packet as it came. XDP leaves it to tc.
func TestKernelLastHop(t *testing.T) {
	r := newXDPRig(t, AccelerationNative)
	for _, protocol := range []proxy.Protocol{proxy.TCP, proxy.UDP} {
		t.Run(string(protocol), func(t *testing.T) {
			proto := protoNumbers[protocol]
			r.sync(t, port("web", protocol, 30080, ep(r.epC, 8080)))
			must(t, clearCT(r.p))
			f := maglev.Flow{Src: r.client, Dst: r.nodeIP, SrcPort: 40001, DstPort: 30080, Protocol: proto}
			first := withTTL(checksummed(f, tcpSYN, false), 1)
			r.timeExceeded(t, "a new flow's first packet with TTL 1", first, r.client)
			next := withTTL(checksummed(f, tcpACK, false), 1)
			if v, b := r.runXDP(t, r.a0, next); v != xdpPass || string(b) != string(next) {
				t.Errorf("a packet with TTL 1: XDP verdict %d (want XDP_PASS %d), packet changed: %v", v, xdpPass, string(b) != string(next))
			}
			r.timeExceeded(t, "the flow's next packet with TTL 1", next, r.client)
			// The flow's entry stands: a packet with hops left is forwarded.
			v, sent := r.runTC(t, r.a0, withTTL(next, 2))
			if v != tcRedirect || sent[14+8] != 1 || tupleDst(sent) != netip.AddrPortFrom(r.epC, 8080) {
				t.Fatalf("a packet with TTL 2: verdict %d, left for %v with TTL %d; want forwarded to %v with 1",
					v, tupleDst(sent), sent[14+8], netip.AddrPortFrom(r.epC, 8080))
			}
			reply := withTTL(checksummed(answer(sent, proto), tcpACK, false), 1)
			r.timeExceededOn(t, "the endpoint's reply with TTL 1", r.c0, reply, r.epC)
		})
	}
}

// timeExceeded runs pkt (from the client's link) through np_ingress and
// fails unless it is answered with time exceeded to to.
func (r *xdpRig) timeExceeded(t *testing.T, what string, pkt []byte, to netip.Addr) {
	t.Helper()
	r.timeExceededOn(t, what, r.a0, pkt, to)
}

func (r *xdpRig) timeExceededOn(t *testing.T, what string, in *net.Interface, pkt []byte, to netip.Addr) {
	t.Helper()
	v, out := r.runTC(t, in, slices.Clone(pkt))
	if v != tcRedirect {
		t.Fatalf("%s: verdict %d, want TC_ACT_REDIRECT (the answer sent back)", what, v)
	}
	src, dst, typ, code, quote := icmpOf(t, what, out)
	sentTo := netip.AddrFrom4([4]byte(pkt[30:34]))
	if src != sentTo || dst != to || typ != 11 || code != 0 {
		t.Errorf("%s: answered %v → %v type %d code %d, want %v → %v time exceeded (11, 0)", what, src, dst, typ, code, sentTo, to)
	}
	if want := pkt[14 : 14+28]; string(quote) != string(want) {
		t.Errorf("%s: the answer quotes\n %x\nwant the packet as it came\n %x", what, quote, want)
	}
}
