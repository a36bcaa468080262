package nodeport

import (
	"bytes"
	"context"
	"fmt"
	"net/netip"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/svcproxy/svcproxy/pkg/kconntrack"
	"github.com/svcproxy/svcproxy/pkg/pipeline/maglev"
	"github.com/svcproxy/svcproxy/pkg/proxy"
	"github.com/svcproxy/svcproxy/pkg/testing/netnstest"
)

// TestHolds: which flows keep the programs while they drain. An open TCP
// connection does while it had a packet within Idle, however quiet since;
// a handshake, a close and UDP (replied or not) only while a packet went
// within Quiet; a reset connection never. The clock may read an entry
// refreshed after it was read (seen past now).
func TestHolds(t *testing.T) {
	times := DrainTimes{Quiet: 2 * time.Second, Idle: time.Minute}
	const now = uint64(1000 * time.Second)
	ago := func(d time.Duration) uint64 { return now - uint64(d) }
	const closing = 2
	for _, c := range []struct {
		what  string
		proto uint8
		state uint8
		seen  uint64
		want  bool
	}{
		{"established, a packet just now", unix.IPPROTO_TCP, ctEstablished, now, true},
		{"established, quiet for 30s", unix.IPPROTO_TCP, ctEstablished, ago(30 * time.Second), true},
		{"established, quiet past Idle", unix.IPPROTO_TCP, ctEstablished, ago(61 * time.Second), false},
		{"established, refreshed after the clock was read", unix.IPPROTO_TCP, ctEstablished, now + 5, true},
		{"handshake in flight", unix.IPPROTO_TCP, ctNew, ago(time.Second), true},
		{"handshake never answered", unix.IPPROTO_TCP, ctNew, ago(3 * time.Second), false},
		{"closing, a packet just now", unix.IPPROTO_TCP, closing, ago(100 * time.Millisecond), true},
		{"closed quietly", unix.IPPROTO_TCP, closing, ago(3 * time.Second), false},
		{"reset just now", unix.IPPROTO_TCP, ctClosed, now, false},
		{"UDP replied, a datagram just now", unix.IPPROTO_UDP, ctEstablished, ago(time.Second), true},
		{"UDP replied, quiet for 3s", unix.IPPROTO_UDP, ctEstablished, ago(3 * time.Second), false},
		{"UDP not replied, a datagram just now", unix.IPPROTO_UDP, ctNew, now, true},
	} {
		if got := holds(c.state, c.seen, c.proto, now, times); got != c.want {
			t.Errorf("%s: holds %t, want %t", c.what, got, c.want)
		}
	}
}

// TestKernelDrain: the programs drained under an open TCP connection to an
// endpoint on another node (masqueraded, all of its packets theirs) and
// beside connections that closed, in either family. Once BeginDrain
// returns, the closed ones' flows have left the table, the open one's
// stays, and the frontend is gone, so a new connection meets node1's own
// stack (nothing listens: refused). Begun again, WaitDrained waits for the
// open connection, which still reaches its endpoint; once it closes and is
// quiet, WaitDrained returns with no flow holding, and Remove leaves the node
// port to the stack.
func TestKernelDrain(t *testing.T) {
	for _, family := range []proxy.IPFamily{proxy.IPv4, proxy.IPv6} {
		t.Run(string(family), func(t *testing.T) { testDrain(t, family) })
	}
}

func testDrain(t *testing.T, family proxy.IPFamily) {
	r := newRig(t)
	node, podB, st := r.node1.IPv4, r.podB.IPv4, stateOf
	if family == proxy.IPv6 {
		node, podB, st = r.node1.IPv6, r.podB.IPv6, stateOf6
	}
	masqueraded := func(p netip.AddrPort) bool { return p.Addr() == node && MasqueradePort(p.Port()) }
	dst := netip.AddrPortFrom(node, 30080)
	p := r.proxier(t, "np")
	r.sync(t, p, st(node, port("web", proxy.TCP, 30080, ep(podB, 8080))), proxy.RecoverySync)
	open, err := r.client.DialTCP(dst)
	must(t, err)
	defer open.Close()
	if ans, err := open.Ask(); err != nil || !masqueraded(ans.Peer) {
		t.Fatalf("the connection to hold open: %v, %v; want pod-b seeing node1 from a masquerade port", ans, err)
	}
	r.ask(t, proxy.TCP, dst, 5, map[string]func(netip.AddrPort) bool{"pod-b": masqueraded})
	if n := flowCount(t, p.Flows(), family); n != 6 {
		t.Fatalf("%d flows in the table before the drain, want 6", n)
	}
	p.Close()

	times := DrainTimes{Quiet: 500 * time.Millisecond, Idle: time.Minute}
	time.Sleep(times.Quiet)
	dir := filepath.Join(r.pins, "np")
	must(t, BeginDrain(dir, times))
	if n := flowCount(t, p.Flows(), family); n != 1 {
		t.Errorf("%d flows in the table once the drain began, want the open connection's alone", n)
	}
	if got := r.outcome(proxy.TCP, dst); got != netnstest.Refused {
		t.Errorf("a new connection once the drain began: %v, want refused by node1's stack", got)
	}
	// Beginning again changes nothing: the open connection's flow stays.
	must(t, BeginDrain(dir, times))
	held, drained := make(chan int, 1), make(chan error, 1)
	go func() {
		n, err := WaitDrained(context.Background(), dir, times, func(n int) { held <- n })
		if err == nil && n != 0 {
			err = fmt.Errorf("%d flows still held the programs when the drain ended", n)
		}
		drained <- err
	}()
	select {
	case n := <-held:
		if n != 1 {
			t.Errorf("the drain waits for %d flows, want the open connection's", n)
		}
	case err := <-drained:
		t.Fatalf("the drain ended at once (%v) with a connection open", err)
	}
	if ans, err := open.Ask(); err != nil || ans.Server != "pod-b" {
		t.Errorf("the open connection while the programs drain: %v, %v; want pod-b", ans, err)
	}
	must(t, open.Close())
	select {
	case err := <-drained:
		must(t, err)
	case <-time.After(times.Idle):
		t.Fatalf("the drain did not end within %v of the connection's close", times.Idle)
	}
	must(t, Remove(dir))
	if n := r.attachedTCX(t, "fab0"); n != 0 {
		t.Errorf("%d programs on fab0 after Remove, want 0", n)
	}
}

// flowCount is how many flows of family f lists.
func flowCount(t *testing.T, f *Flows, family proxy.IPFamily) int {
	t.Helper()
	n := 0
	must(t, f.List(context.Background(), family, func(kconntrack.Flow) { n++ }))
	return n
}

// TestKernelDrainLeavesAKernelFlowItsReplies: while the programs drain,
// the rules masquerade new flows to the same endpoints, and the kernel's
// masquerade, which does not see np_ct, may give one the reply tuple a
// held flow's entry still claims. A reply to that tuple is then the kernel
// flow's: np_ingress passes it to the stack untouched and np_xdp to
// np_ingress, instead of sending it to the held flow's client. Before the
// drain, and for a reply tuple the kernel does not hold, the held flow
// keeps its replies.
func TestKernelDrainLeavesAKernelFlowItsReplies(t *testing.T) {
	r := newXDPRig(t, AccelerationNative)
	r.sync(t, port("web", proxy.UDP, 30080, ep(r.epC, 8080)))
	got := r.openFlows(t, []uint16{40000, 40001})
	taken, kept := got.ports[40000], got.ports[40001]
	if len(got.ports) != 2 {
		t.Fatalf("two flows to the node port: %+v, want both masqueraded", got)
	}
	reply := func(p uint16) []byte {
		return checksummed(maglev.Flow{Src: r.epC, Dst: r.nodeIP, SrcPort: 8080, DstPort: p, Protocol: 17}, 0, false)
	}
	// The rules' flow from another client, masqueraded to the port the
	// first held flow has.
	kernelFlow := kconntrack.Flow{Proto: 17,
		Orig:  kconntrack.Tuple{Src: netip.AddrPortFrom(r.client, 40100), Dst: netip.AddrPortFrom(r.nodeIP, 30080)},
		Reply: kconntrack.Tuple{Src: netip.AddrPortFrom(r.epC, 8080), Dst: netip.AddrPortFrom(r.nodeIP, taken)}}
	r.createKernelFlow(t, proxy.IPv4, kernelFlow)

	if v, _ := r.runXDP(t, r.c0, reply(taken)); v == xdpPass {
		t.Errorf("before the drain, np_xdp passed a reply of its held flow (XDP_PASS), want it sent on")
	}
	if dst := r.replyFor(t, taken); dst != netip.AddrPortFrom(r.client, 40000) {
		t.Errorf("before the drain, a reply to masquerade port %d went to %v, want the held flow's client", taken, dst)
	}
	must(t, markDraining[[4]byte](r.pins))
	in := reply(taken)
	if v, out := r.runXDP(t, r.c0, slices.Clone(in)); v != xdpPass || !bytes.Equal(out, in) {
		t.Errorf("draining, np_xdp on a reply the kernel's flow claims: verdict %d, changed %t; want XDP_PASS (%d), unchanged", v, !bytes.Equal(out, in), xdpPass)
	}
	if v, out := r.runTC(t, r.c0, slices.Clone(in)); v != tcOK || !bytes.Equal(out[:len(in)], in) {
		t.Errorf("draining, np_ingress on a reply the kernel's flow claims: verdict %d, sent to %v; want TC_ACT_OK (%d), untouched, for the stack", v, tupleDst(out), tcOK)
	}
	if dst := r.replyFor(t, kept); dst != netip.AddrPortFrom(r.client, 40001) {
		t.Errorf("draining, a reply to masquerade port %d, which the kernel does not hold, went to %v, want the held flow's client", kept, dst)
	}
}

// TestKernelDrainLeavesAKernelFlowItsRepliesIPv6: the same in IPv6, at tc
// (np_xdp leaves IPv6 to tc).
func TestKernelDrainLeavesAKernelFlowItsRepliesIPv6(t *testing.T) {
	r := newRig6(t)
	r.sync6(t, port("web", proxy.UDP, 30080, ep(r.epC, 8080)))
	masqPort := func(clientPort uint16) uint16 {
		f := maglev.Flow{Src: r.client, Dst: r.nodeIP, SrcPort: clientPort, DstPort: 30080, Protocol: 17}
		v, out := r.runTC(t, r.a0, packet6(f, 0))
		src, dst, _ := tuple6(out)
		if v != tcRedirect || src.Addr() != r.nodeIP || dst != netip.AddrPortFrom(r.epC, 8080) {
			t.Fatalf("a flow from port %d: verdict %d, %v → %v; want masqueraded to [%v]:8080", clientPort, v, src, dst, r.epC)
		}
		return src.Port()
	}
	taken, kept := masqPort(40000), masqPort(40001)
	replyTo := func(p uint16) (uint32, netip.AddrPort, bool) {
		in := packet6(maglev.Flow{Src: r.epC, Dst: r.nodeIP, SrcPort: 8080, DstPort: p, Protocol: 17}, 0)
		v, out := r.runTC(t, r.c0, slices.Clone(in))
		_, dst, _ := tuple6(out)
		return v, dst, bytes.Equal(out[:len(in)], in)
	}
	r.createKernelFlow(t, proxy.IPv6, kconntrack.Flow{Proto: 17,
		Orig:  kconntrack.Tuple{Src: netip.AddrPortFrom(r.client, 40100), Dst: netip.AddrPortFrom(r.nodeIP, 30080)},
		Reply: kconntrack.Tuple{Src: netip.AddrPortFrom(r.epC, 8080), Dst: netip.AddrPortFrom(r.nodeIP, taken)}})
	must(t, markDraining[[16]byte](r.pins))
	if v, dst, same := replyTo(taken); v != tcOK || !same {
		t.Errorf("draining, np_ingress on a reply the kernel's flow claims: verdict %d, sent to %v; want TC_ACT_OK (%d), untouched, for the stack", v, dst, tcOK)
	}
	if v, dst, _ := replyTo(kept); v != tcRedirect || dst != netip.AddrPortFrom(r.client, 40001) {
		t.Errorf("draining, a reply to masquerade port %d, which the kernel does not hold: verdict %d to %v, want the held flow's client", kept, v, dst)
	}
}

// createKernelFlow adds flows to the kernel's conntrack in the rig's node.
func (r *xdpRig) createKernelFlow(t *testing.T, family proxy.IPFamily, flows ...kconntrack.Flow) {
	t.Helper()
	h, err := netns.GetFromPath(r.node.Path())
	must(t, err)
	defer h.Close()
	ct, err := kconntrack.NewAt(h)
	must(t, err)
	defer ct.Close()
	_, err = ct.Create(context.Background(), family, flows, time.Minute)
	must(t, err)
}
