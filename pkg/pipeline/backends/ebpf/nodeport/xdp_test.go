package nodeport

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"maps"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netlink/nl"

	"github.com/svcproxy/svcproxy/pkg/pipeline/desired"
	"github.com/svcproxy/svcproxy/pkg/pipeline/maglev"
	"github.com/svcproxy/svcproxy/pkg/proxy"
	"github.com/svcproxy/svcproxy/pkg/testing/netnstest"
)

// xdpRig is a node namespace with two links: a0 toward the client and one
// endpoint, c0 toward another endpoint, all neighbours static. The
// programs run on crafted packets (BPF_PROG_RUN) as if received on a0.
type xdpRig struct {
	node     *netnstest.NS
	p        *Proxier
	a0, c0   *net.Interface
	nodeIP   netip.Addr
	client   netip.Addr
	epA, epC netip.Addr
	pins     string
	macs     map[netip.Addr]net.HardwareAddr
}

// rigPlan is the addresses of an xdpRig: the node's on a0 and c0 (their
// prefixes), the client's prefix behind a0, and the endpoints on each link.
type rigPlan struct {
	a0, c0, clients  netip.Prefix
	client, epA, epC netip.Addr
}

var plan4 = rigPlan{a0: netip.MustParsePrefix("198.18.5.1/24"), c0: netip.MustParsePrefix("198.18.6.1/24"),
	clients: netip.MustParsePrefix("198.18.9.0/24"), client: netip.MustParseAddr("198.18.9.7"),
	epA: netip.MustParseAddr("198.18.5.9"), epC: netip.MustParseAddr("198.18.6.9")}

func newXDPRig(t testing.TB, accel Acceleration) *xdpRig { return newRigOf(t, plan4, accel) }

func newRigOf(t testing.TB, plan rigPlan, accel Acceleration) *xdpRig {
	netnstest.RequireKernel(t)
	lab := netnstest.New(t)
	r := &xdpRig{nodeIP: plan.a0.Addr(), client: plan.client, epA: plan.epA, epC: plan.epC,
		macs: map[netip.Addr]net.HardwareAddr{}}
	var err error
	r.node, err = lab.NewNS("node")
	must(t, err)
	peer, err := lab.NewNS("peer")
	must(t, err)
	must(t, netnstest.Veth(r.node, "a0", peer, "b0"))
	must(t, netnstest.Veth(r.node, "c0", peer, "d0"))
	must(t, r.node.AddAddr("a0", plan.a0))
	must(t, r.node.AddAddr("c0", plan.c0))
	// bpf_fib_lookup answers for a forwarding node only.
	must(t, r.node.EnableForwarding())
	must(t, r.node.AddDeviceRoute(plan.clients, "a0"))
	for i, nb := range []struct {
		ip  netip.Addr
		dev string
	}{{r.client, "a0"}, {r.epA, "a0"}, {r.epC, "c0"}} {
		mac := net.HardwareAddr{0x02, 0, 0, 0, 0, byte(i + 1)}
		r.macs[nb.ip] = mac
		_, err := r.node.Run(context.Background(), "ip", "neigh", "replace", nb.ip.String(), "lladdr", mac.String(), "dev", nb.dev, "nud", "permanent")
		must(t, err)
	}
	must(t, r.node.Do(func() error {
		if r.a0, err = net.InterfaceByName("a0"); err != nil {
			return err
		}
		r.c0, err = net.InterfaceByName("c0")
		return err
	}))
	r.pins = filepath.Join(netnstest.MountThrowaway(t, "bpf"), "tc")
	r.p = r.proxier(t, accel, "a0", "c0")
	return r
}

// proxier is a Proxier of the rig's node on ifaces, pinning where the
// rig's others do.
func (r *xdpRig) proxier(t testing.TB, accel Acceleration, ifaces ...string) *Proxier {
	p, err := New(Options{PinDir: r.pins, Interfaces: ifaces, Acceleration: accel})
	must(t, err)
	t.Cleanup(p.Close)
	return p
}

func (r *xdpRig) sync(t testing.TB, sps ...*desired.ServicePort) {
	t.Helper()
	must(t, r.node.Do(func() error {
		return r.p.Sync(context.Background(), stateOf(r.nodeIP, sps...), proxy.FullSync)
	}))
}

// xdpContext is struct xdp_md as BPF_PROG_RUN takes it.
type xdpContext struct {
	Data, DataEnd, DataMeta, IngressIfindex, RxQueueIndex, EgressIfindex uint32
}

// The return codes the tests see.
const (
	xdpPass     = 2
	xdpTX       = 3
	xdpRedirect = 4
	tcRedirect  = 7
)

// runXDP runs np_xdp over pkt as received on in, and returns its verdict
// and the packet after.
func (r *xdpRig) runXDP(t *testing.T, in *net.Interface, pkt []byte) (uint32, []byte) {
	t.Helper()
	opts := &ebpf.RunOptions{Data: pkt, DataOut: make([]byte, len(pkt)),
		Context: xdpContext{DataEnd: uint32(len(pkt)), IngressIfindex: uint32(in.Index)}}
	var ret uint32
	must(t, r.node.Do(func() (err error) {
		ret, err = r.p.kernel.coll.Programs[progXDP].Run(opts)
		return err
	}))
	return ret, opts.DataOut
}

// tcContext is struct __sk_buff up to ingress_ifindex, the rest zero.
type tcContext struct {
	Len, PktType, Mark, QueueMapping, Protocol, VlanPresent, VlanTCI, VlanProto, Priority, IngressIfindex uint32
	Rest                                                                                                  [192 - 40]byte
}

// runTC runs np_ingress over pkt as received on in.
func (r *xdpRig) runTC(t *testing.T, in *net.Interface, pkt []byte) (uint32, []byte) {
	t.Helper()
	return r.runProg(t, "np_ingress", in, pkt)
}

// runProg runs the tc program prog over pkt as received on in, and returns
// its verdict and the packet after (an answer may be longer).
func (r *xdpRig) runProg(t *testing.T, prog string, in *net.Interface, pkt []byte) (uint32, []byte) {
	t.Helper()
	opts := &ebpf.RunOptions{Data: pkt, DataOut: make([]byte, len(pkt)+64),
		Context: tcContext{IngressIfindex: uint32(in.Index)}, ContextOut: &tcContext{}}
	var ret uint32
	must(t, r.node.Do(func() (err error) {
		ret, err = r.p.kernel.coll.Programs[prog].Run(opts)
		return err
	}))
	return ret, opts.DataOut
}

// checksummed is packetFlags with valid IPv4 and L4 checksums (UDP's left
// zero, "none", when noUDPSum).
func checksummed(f maglev.Flow, flags byte, noUDPSum bool) []byte {
	b := packetFlags(f, flags)
	ip := b[14:34]
	binary.BigEndian.PutUint16(ip[10:], ^sum16(0, ip))
	if f.Protocol == 17 && noUDPSum {
		return b
	}
	csumAt := 34 + 16
	if f.Protocol == 17 {
		csumAt = 34 + 6
	}
	binary.BigEndian.PutUint16(b[csumAt:], ^l4Sum(b))
	return b
}

// l4Sum is the one's complement sum of the L4 segment and its
// pseudo-header (checksum field included).
func l4Sum(b []byte) uint16 {
	ip, l4 := b[14:34], b[34:]
	pseudo := make([]byte, 12)
	copy(pseudo, ip[12:20])
	pseudo[9] = ip[9]
	binary.BigEndian.PutUint16(pseudo[10:], uint16(len(l4)))
	return sum16(sum16(0, pseudo), l4)
}

func sum16(start uint16, b []byte) uint16 {
	s := uint32(start)
	for i := 0; i+1 < len(b); i += 2 {
		s += uint32(binary.BigEndian.Uint16(b[i:]))
	}
	for s > 0xffff {
		s = s&0xffff + s>>16
	}
	return uint16(s)
}

// tuple is the packet's addresses and ports.
func tuple(b []byte) (src, dst netip.AddrPort) {
	ip := b[14:]
	return netip.AddrPortFrom(netip.AddrFrom4([4]byte(ip[12:16])), binary.BigEndian.Uint16(ip[20:])),
		netip.AddrPortFrom(netip.AddrFrom4([4]byte(ip[16:20])), binary.BigEndian.Uint16(ip[22:]))
}

// answer is the endpoint's answer to a packet the node sent it.
func answer(sent []byte, proto uint8) maglev.Flow {
	src, dst := tuple(sent)
	return maglev.Flow{Src: dst.Addr(), Dst: src.Addr(), SrcPort: dst.Port(), DstPort: src.Port(), Protocol: proto}
}

// checkSums fails unless b's IPv4 and L4 checksums are valid (a UDP
// datagram without one must still have none when noUDPSum).
func checkSums(t *testing.T, what string, b []byte, proto uint8, noUDPSum bool) {
	t.Helper()
	if s := sum16(0, b[14:34]); s != 0xffff {
		t.Errorf("%s: IPv4 header checksum invalid (sum %#x)", what, s)
	}
	if proto == 17 && noUDPSum {
		if c := binary.BigEndian.Uint16(b[34+6:]); c != 0 {
			t.Errorf("%s: a UDP datagram without a checksum got one (%#x)", what, c)
		}
		return
	}
	if s := l4Sum(b); s != 0xffff {
		t.Errorf("%s: L4 checksum invalid (sum %#x)", what, s)
	}
}

// TestKernelXDPForwardsAsTC: for a flow np_ingress forwards to an endpoint
// on another node, np_xdp leaves the first packet to tc, then gives every
// later packet and the endpoint's replies exactly the headers np_ingress
// gives them (the same packet run through both), with valid checksums and
// the next hop's MAC addresses: sent back out of the link it came in on
// (XDP_TX) or redirected to the endpoint's; a FIN goes to tc.
func TestKernelXDPForwardsAsTC(t *testing.T) {
	r := newXDPRig(t, AccelerationNative)
	for _, tc := range []struct {
		name     string
		proto    proxy.Protocol
		noUDPSum bool
		ep       netip.Addr
		out      *net.Interface
	}{
		{"TCP, endpoint out of the client's link", proxy.TCP, false, r.epA, r.a0},
		{"TCP, endpoint out of another link", proxy.TCP, false, r.epC, r.c0},
		{"UDP, endpoint out of the client's link", proxy.UDP, false, r.epA, r.a0},
		{"UDP without a checksum, endpoint out of another link", proxy.UDP, true, r.epC, r.c0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r.sync(t, port("web", tc.proto, 30080, ep(tc.ep, 8080)))
			must(t, clearCT(r.p))
			r.checkFlow(t, tc.proto, tc.noUDPSum, tc.ep, tc.out)
		})
	}
}

func (r *xdpRig) checkFlow(t *testing.T, protocol proxy.Protocol, noUDPSum bool, epIP netip.Addr, out *net.Interface) {
	proto := uint8(6)
	if protocol == proxy.UDP {
		proto = 17
	}
	f := maglev.Flow{Src: r.client, Dst: r.nodeIP, SrcPort: 40001, DstPort: 30080, Protocol: proto}
	first := checksummed(f, tcpSYN, noUDPSum)
	if v, b := r.runXDP(t, r.a0, first); v != xdpPass || string(b) != string(first) {
		t.Fatalf("a new flow's first packet: XDP verdict %d (want XDP_PASS %d), packet changed: %v", v, xdpPass, string(b) != string(first))
	}
	if v, _ := r.runTC(t, r.a0, first); v != tcRedirect {
		t.Fatalf("np_ingress on the first packet: verdict %d, want TC_ACT_REDIRECT", v)
	}
	next := checksummed(f, tcpACK, noUDPSum)
	sent := r.same(t, "the flow's next packet", r.a0, next, out, epIP, proto, noUDPSum)
	if dst := netip.AddrPortFrom(epIP, 8080); tupleDst(sent) != dst {
		t.Errorf("forwarded to %v, want %v", tupleDst(sent), dst)
	}
	back := checksummed(answer(sent, proto), tcpACK, noUDPSum)
	got := r.same(t, "the endpoint's reply", out, back, r.a0, r.client, proto, noUDPSum)
	if src, dst := tuple(got); src != netip.AddrPortFrom(r.nodeIP, 30080) || dst != netip.AddrPortFrom(r.client, 40001) {
		t.Errorf("the reply left as %v → %v, want from the node port to the client", src, dst)
	}
	if proto == 6 {
		var v ctVal
		k := ctKey{Src: f.Src.As4(), Dst: f.Dst.As4(), Sport: netPort(f.SrcPort), Dport: netPort(f.DstPort), Proto: proto}
		must(t, r.p.kernel.coll.Maps[mapCT].Lookup(k, &v))
		if v.State != 1 {
			t.Errorf("after the reply through XDP the flow is in state %d, want established (1)", v.State)
		}
		if verdict, _ := r.runXDP(t, r.a0, checksummed(f, tcpFIN|tcpACK, false)); verdict != xdpPass {
			t.Errorf("a FIN: XDP verdict %d, want XDP_PASS", verdict)
		}
	}
}

func tupleDst(b []byte) netip.AddrPort { _, d := tuple(b); return d }

// TestKernelXDPLeavesPartialChecksumsToTC: a packet of a flow np_xdp
// forwards, but whose L4 checksum holds only its pseudo-header's sum (what
// a sender on the same machine leaves for the device to finish, and a veth
// delivers as it is), passes to tc unchanged, in both directions; the same
// packet with its checksum finished is forwarded.
func TestKernelXDPLeavesPartialChecksumsToTC(t *testing.T) {
	r := newXDPRig(t, AccelerationNative)
	for _, tc := range []struct {
		name  string
		proto proxy.Protocol
	}{{"TCP", proxy.TCP}, {"UDP", proxy.UDP}} {
		t.Run(tc.name, func(t *testing.T) {
			r.sync(t, port("web", tc.proto, 30080, ep(r.epC, 8080)))
			must(t, clearCT(r.p))
			proto := uint8(6)
			if tc.proto == proxy.UDP {
				proto = 17
			}
			f := maglev.Flow{Src: r.client, Dst: r.nodeIP, SrcPort: 40002, DstPort: 30080, Protocol: proto}
			if v, _ := r.runTC(t, r.a0, checksummed(f, tcpSYN, false)); v != tcRedirect {
				t.Fatalf("np_ingress on the first packet: verdict %d, want TC_ACT_REDIRECT", v)
			}
			next := partial(checksummed(f, tcpACK, false))
			if v, b := r.runXDP(t, r.a0, slices.Clone(next)); v != xdpPass || !bytes.Equal(b, next) {
				t.Errorf("the next packet with a partial checksum: XDP verdict %d (want XDP_PASS %d), packet changed: %v",
					v, xdpPass, !bytes.Equal(b, next))
			}
			_, sent := r.runTC(t, r.a0, checksummed(f, tcpACK, false))
			back := partial(checksummed(answer(sent, proto), tcpACK, false))
			if v, b := r.runXDP(t, r.c0, slices.Clone(back)); v != xdpPass || !bytes.Equal(b, back) {
				t.Errorf("the reply with a partial checksum: XDP verdict %d (want XDP_PASS %d), packet changed: %v",
					v, xdpPass, !bytes.Equal(b, back))
			}
			if v, _ := r.runXDP(t, r.a0, checksummed(f, tcpACK, false)); v != xdpTX && v != xdpRedirect {
				t.Errorf("the next packet with its checksum finished: XDP verdict %d, want it forwarded", v)
			}
		})
	}
}

// partial gives b's L4 checksum field the sum of its pseudo-header alone,
// as a sender that leaves the checksum to the device writes it.
func partial(b []byte) []byte {
	ip, l4 := b[14:34], b[34:]
	pseudo := make([]byte, 12)
	copy(pseudo, ip[12:20])
	pseudo[9] = ip[9]
	binary.BigEndian.PutUint16(pseudo[10:], uint16(len(l4)))
	csumAt := 34 + 16
	if ip[9] == 17 {
		csumAt = 34 + 6
	}
	binary.BigEndian.PutUint16(b[csumAt:], sum16(0, pseudo))
	return b
}

// same runs pkt through np_xdp and np_ingress as received on in, and
// fails unless XDP sent it out of out to the next hop nh with the headers
// tc gave it, one hop less (forwarded, as the kernel would) and valid
// checksums. It returns XDP's packet.
func (r *xdpRig) same(t *testing.T, what string, in *net.Interface, pkt []byte, out *net.Interface, nh netip.Addr, proto uint8, noUDPSum bool) []byte {
	t.Helper()
	verdict, x := r.runXDP(t, in, slices.Clone(pkt))
	want := uint32(xdpRedirect)
	if out.Index == in.Index {
		want = xdpTX
	}
	if verdict != want {
		t.Fatalf("%s: XDP verdict %d, want %d", what, verdict, want)
	}
	tcv, y := r.runTC(t, in, slices.Clone(pkt))
	if tcv != tcRedirect {
		t.Fatalf("%s: np_ingress verdict %d, want TC_ACT_REDIRECT", what, tcv)
	}
	if string(x[14:]) != string(y[14:]) {
		t.Errorf("%s: XDP's headers differ from tc's:\n xdp %x\n tc  %x", what, x[14:], y[14:])
	}
	if got, sent := y[14+8], pkt[14+8]; got != sent-1 {
		t.Errorf("%s: forwarded with TTL %d, sent with %d: want one less", what, got, sent)
	}
	if !bytes.Equal(x[0:6], r.macs[nh]) || !bytes.Equal(x[6:12], out.HardwareAddr) {
		t.Errorf("%s: MACs %v → %v, want %v → %v", what, net.HardwareAddr(x[6:12]), net.HardwareAddr(x[0:6]), out.HardwareAddr, r.macs[nh])
	}
	checkSums(t, what, x, proto, noUDPSum)
	return x
}

// xdpOn lists which of ifaces in ns have an XDP program attached in
// driver mode, and fails on any other mode.
func xdpOn(t *testing.T, ns *netnstest.NS, ifaces ...string) []string {
	t.Helper()
	var on []string
	must(t, ns.Do(func() error {
		for _, name := range ifaces {
			l, err := netlink.LinkByName(name)
			if err != nil {
				return err
			}
			if x := l.Attrs().Xdp; x != nil && x.Attached {
				if x.AttachMode != nl.XDP_ATTACHED_DRV {
					t.Errorf("%s: XDP attached in mode %d, want driver mode", name, x.AttachMode)
				}
				on = append(on, name)
			}
		}
		return nil
	}))
	return on
}

// TestKernelXDPAttach: --bpf-acceleration=native attaches np_xdp to every
// interface in driver mode and pins its links; a start without it
// detaches them and leaves tc; best-effort skips an interface whose
// driver has no native XDP (a bridge), which native refuses; Cleanup
// removes everything.
func TestKernelXDPAttach(t *testing.T) {
	r := newXDPRig(t, AccelerationNative)
	must(t, r.node.Do(func() error {
		nox := &netlink.Bridge{LinkAttrs: netlink.LinkAttrs{Name: "br0"}}
		if err := netlink.LinkAdd(nox); err != nil {
			return err
		}
		return netlink.LinkSetUp(nox)
	}))
	sp := port("web", proxy.TCP, 30080, ep(r.epA, 8080))
	all := []string{"a0", "c0", "br0"}
	r.sync(t, sp)
	if got := xdpOn(t, r.node, all...); !slices.Equal(got, []string{"a0", "c0"}) || !slices.Equal(r.p.Accelerated(), got) {
		t.Errorf("native: XDP on %v, Accelerated %v; want a0 and c0", got, r.p.Accelerated())
	}
	for _, iface := range []string{"a0", "c0"} {
		if _, err := os.Stat(linkPin(r.pins, progXDP, iface)); err != nil {
			t.Errorf("native: np_xdp's link on %s is not pinned: %v", iface, err)
		}
	}
	r.p.Close()
	if got := xdpOn(t, r.node, all...); len(got) != 2 {
		t.Errorf("after Close (a restart), XDP on %v, want still on a0 and c0 (pinned)", got)
	}

	off := r.proxier(t, "", "a0", "c0")
	r.syncWith(t, off, sp)
	if got := xdpOn(t, r.node, all...); len(got) != 0 {
		t.Errorf("a start without acceleration left XDP on %v", got)
	}
	if n, err := r.node.TCXPrograms("a0"); err != nil || n != 2 {
		t.Errorf("a start without acceleration: %d tc programs on a0 (%v), want 2", n, err)
	}
	r.checkXDPOut(t, off)
	off.Close()

	best := r.proxier(t, AccelerationBestEffort, "a0", "br0")
	r.syncWith(t, best, sp)
	if got := xdpOn(t, r.node, all...); !slices.Equal(got, []string{"a0"}) || !slices.Equal(best.Accelerated(), got) {
		t.Errorf("best-effort with a bridge: XDP on %v, Accelerated %v; want a0 only", got, best.Accelerated())
	}
	if n, err := r.node.TCXPrograms("br0"); err != nil || n != 2 {
		t.Errorf("best-effort: %d tc programs on the bridge (%v), want 2", n, err)
	}
	r.checkXDPOut(t, best)
	best.Close()

	native := r.proxier(t, AccelerationNative, "a0", "br0")
	err := r.node.Do(func() error {
		return native.Sync(context.Background(), stateOf(r.nodeIP, sp), proxy.FullSync)
	})
	if err == nil || !strings.Contains(err.Error(), "native XDP on br0") {
		t.Errorf("native with a bridge: sync error %v, want one naming native XDP on br0", err)
	}
	must(t, r.node.Do(native.Cleanup))
	if got := xdpOn(t, r.node, all...); len(got) != 0 {
		t.Errorf("after Cleanup XDP is on %v", got)
	}
	if _, err := os.Stat(r.pins); !os.IsNotExist(err) {
		t.Errorf("after Cleanup the pin directory is there (%v)", err)
	}
}

func (r *xdpRig) syncWith(t *testing.T, p *Proxier, sps ...*desired.ServicePort) {
	t.Helper()
	must(t, r.node.Do(func() error {
		return p.Sync(context.Background(), stateOf(r.nodeIP, sps...), proxy.FullSync)
	}))
}

// checkXDPOut fails unless np_xdp_out holds exactly p's accelerated
// interfaces: the only ones XDP may send out of.
func (r *xdpRig) checkXDPOut(t *testing.T, p *Proxier) {
	t.Helper()
	want := map[uint32]bool{}
	must(t, r.node.Do(func() error {
		for _, name := range p.Accelerated() {
			dev, err := net.InterfaceByName(name)
			if err != nil {
				return err
			}
			want[uint32(dev.Index)] = true
		}
		return nil
	}))
	got := map[uint32]bool{}
	var k, v uint32
	it := p.kernel.coll.Maps[mapXDPOut].Iterate()
	for it.Next(&k, &v) {
		got[k] = true
	}
	must(t, it.Err())
	if !maps.Equal(got, want) {
		t.Errorf("np_xdp_out holds %v, want %v (%v)", got, want, p.Accelerated())
	}
}

// TestKernelXDPChecksumEdges: np_xdp's incremental checksums equal
// np_ingress's where one's complement arithmetic has two zeros: a packet
// whose translated L4 checksum comes to 0 (a UDP datagram then carries
// 0xffff, as 0 means none) and its neighbours, TCP and UDP, both ways.
func TestKernelXDPChecksumEdges(t *testing.T) {
	r := newXDPRig(t, AccelerationNative)
	for _, c := range []struct {
		protocol proxy.Protocol
		proto    uint8
		word     int // offset of a 16-bit word the checksum covers, free to set
	}{{proxy.TCP, 6, 34 + 14}, {proxy.UDP, 17, 34 + 8}} {
		r.sync(t, port("web", c.protocol, 30080, ep(r.epC, 8080)))
		must(t, clearCT(r.p))
		f := maglev.Flow{Src: r.client, Dst: r.nodeIP, SrcPort: 40002, DstPort: 30080, Protocol: c.proto}
		r.runTC(t, r.a0, checksummed(f, tcpSYN, false))
		with := func(f maglev.Flow, w uint16) []byte {
			b := packetFlags(f, tcpACK)
			binary.BigEndian.PutUint16(b[c.word:], w)
			return withSums(b)
		}
		// With the word 0, the translated checksum is C; with the word C,
		// the translated sum is all ones and the checksum 0.
		_, x := r.runXDP(t, r.a0, with(f, 0))
		edge := binary.BigEndian.Uint16(x[csumOffset(c.proto):])
		for _, w := range []uint16{edge - 1, edge, edge + 1, ^edge} {
			sent := r.same(t, fmt.Sprintf("%v word %#x", c.protocol, w), r.a0, with(f, w), r.c0, r.epC, c.proto, false)
			if got := binary.BigEndian.Uint16(sent[csumOffset(c.proto):]); w == edge && c.proto == 17 && got != 0xffff {
				t.Errorf("a UDP datagram whose translated checksum comes to 0 carries %#x, want 0xffff", got)
			}
			back := answer(sent, c.proto)
			r.same(t, fmt.Sprintf("%v reply word %#x", c.protocol, w), r.c0, with(back, w), r.a0, r.client, c.proto, false)
		}
	}
}

func csumOffset(proto uint8) int {
	if proto == 6 {
		return 34 + 16
	}
	return 34 + 6
}

// withSums gives the IPv4 packet b valid IPv4 and L4 checksums (a UDP
// checksum that comes to 0 is sent as 0xffff: 0 means none).
func withSums(b []byte) []byte {
	ip := b[14:34]
	binary.BigEndian.PutUint16(ip[10:], 0)
	binary.BigEndian.PutUint16(ip[10:], ^sum16(0, ip))
	at := csumOffset(ip[9])
	binary.BigEndian.PutUint16(b[at:], 0)
	c := ^l4Sum(b)
	if c == 0 && ip[9] == 17 {
		c = 0xffff
	}
	binary.BigEndian.PutUint16(b[at:], c)
	return b
}
