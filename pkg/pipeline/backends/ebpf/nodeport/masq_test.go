package nodeport

import (
	"fmt"
	"net/netip"
	"testing"
	"time"

	"github.com/cilium/ebpf"

	"github.com/svcproxy/svcproxy/pkg/kconntrack"
	"github.com/svcproxy/svcproxy/pkg/pipeline/maglev"
	"github.com/svcproxy/svcproxy/pkg/proxy"
)

// The tests here open many masqueraded flows to one endpoint on another
// node (the xdpRig's epC, out of c0), each a crafted first packet run
// through np_ingress as received on a0.

// masqFlows is what a batch of new flows got.
type masqFlows struct {
	// ports are the masquerade ports of the flows forwarded, by client
	// port.
	ports map[uint16]uint16
	// dropped counts the flows np_ingress dropped.
	dropped int
	// other lists what else happened (a flow forwarded unmasqueraded or
	// to another endpoint).
	other []string
}

// openFlows runs the first packet of a UDP flow from r.client on each of
// clientPorts to the node port 30080 through np_ingress.
func (r *xdpRig) openFlows(t *testing.T, clientPorts []uint16) masqFlows {
	t.Helper()
	got := masqFlows{ports: map[uint16]uint16{}}
	prog := r.p.kernel.coll.Programs["np_ingress"]
	must(t, r.node.Do(func() error {
		for _, cp := range clientPorts {
			f := maglev.Flow{Src: r.client, Dst: r.nodeIP, SrcPort: cp, DstPort: 30080, Protocol: 17}
			pkt := packetFlags(f, 0)
			opts := &ebpf.RunOptions{Data: pkt, DataOut: make([]byte, len(pkt)),
				Context: tcContext{IngressIfindex: uint32(r.a0.Index)}, ContextOut: &tcContext{}}
			verdict, err := prog.Run(opts)
			if err != nil {
				return err
			}
			src, dst := tuple(opts.DataOut)
			switch {
			case verdict == tcShot:
				got.dropped++
			case verdict == tcRedirect && src.Addr() == r.nodeIP && dst == netip.AddrPortFrom(r.epC, 8080):
				got.ports[cp] = src.Port()
			default:
				got.other = append(got.other, fmt.Sprintf("verdict %d: %v → %v", verdict, src, dst))
			}
		}
		return nil
	}))
	return got
}

// replyFor runs the endpoint's answer to the flow masqueraded from port
// through np_ingress as received on c0, and returns where it went.
func (r *xdpRig) replyFor(t *testing.T, port uint16) netip.AddrPort {
	t.Helper()
	f := maglev.Flow{Src: r.epC, Dst: r.nodeIP, SrcPort: 8080, DstPort: port, Protocol: 17}
	verdict, out := r.runTC(t, r.c0, packetFlags(f, 0))
	if verdict != tcRedirect {
		return netip.AddrPort{}
	}
	return tupleDst(out)
}

// masqRig is an xdpRig whose node port 30080 (UDP) goes to epC, on
// another node, masqueraded.
func masqRig(t *testing.T) *xdpRig { return masqRigWith(t, "") }

// masqRigWith is a masqRig with np_xdp as accel says.
func masqRigWith(t *testing.T, accel Acceleration) *xdpRig {
	r := newXDPRig(t, accel)
	sp := port("web", proxy.UDP, 30080, ep(r.epC, 8080))
	r.sync(t, sp)
	if got := r.openFlows(t, []uint16{1}); len(got.ports) != 1 {
		t.Fatalf("a flow to the node port was not masqueraded to the node's address: %+v", got)
	}
	// The first sync seeds and sweeps np_snat beside it: done before the
	// maps are cleared, or a late sweep would free what a test set up and
	// then counts (TestKernelMasqueradeStaleReservations).
	r.p.background.Wait()
	must(t, clearCT(r.p))
	must(t, clearMap[ctKey, snatVal](r.p.kernel.coll.Maps[mapSNAT]))
	return r
}

func portRange(from, n int) []uint16 {
	out := make([]uint16, n)
	for i := range out {
		out[i] = uint16(from + i)
	}
	return out
}

// TestKernelMasqueradePortsPerEndpoint: far more flows to one endpoint
// than 61000–65535 holds each get their own masquerade port (so their
// own reply tuple), outside the node's ephemeral range, and each reply
// goes back to its own client.
func TestKernelMasqueradePortsPerEndpoint(t *testing.T) {
	r := masqRig(t)
	const n = 12000
	got := r.openFlows(t, portRange(2000, n))
	t.Logf("%d flows to one endpoint: %d masqueraded, %d dropped, %d otherwise", n, len(got.ports), got.dropped, len(got.other))
	if len(got.ports) != n {
		t.Errorf("%d of %d flows masqueraded (%d dropped, others: %.3v), want all", len(got.ports), n, got.dropped, got.other)
	}
	seen := map[uint16]uint16{}
	for cp, mp := range got.ports {
		if prev, ok := seen[mp]; ok {
			t.Errorf("client ports %d and %d share masquerade port %d", prev, cp, mp)
		}
		seen[mp] = cp
		if !MasqueradePort(mp) {
			t.Errorf("client port %d masqueraded from port %d: below 1024 or in the node's ephemeral range", cp, mp)
		}
	}
	wrong := 0
	for cp, mp := range got.ports {
		if back := r.replyFor(t, mp); back != netip.AddrPortFrom(r.client, cp) {
			wrong++
			if wrong <= 5 {
				t.Errorf("the reply to masquerade port %d went to %v, want the client's port %d", mp, back, cp)
			}
		}
	}
	if wrong > 0 {
		t.Errorf("%d of %d replies went elsewhere", wrong, len(got.ports))
	}
}

// TestKernelMasqueradePortsRunOut: past the range's ports to one endpoint,
// a new flow is dropped and counted (Drops), leaving no entry; none is
// given a port in use.
func TestKernelMasqueradePortsRunOut(t *testing.T) {
	r := masqRig(t)
	const n, span = 40000, (32768 - 1024) + (65536 - 61000)
	got := r.openFlows(t, portRange(1024, n))
	drops, err := r.p.Drops(proxy.IPv4)
	must(t, err)
	t.Logf("%d flows to one endpoint (%d masquerade ports): %d masqueraded, %d dropped, %d counted",
		n, span, len(got.ports), got.dropped, drops.NoMasqueradePort)
	distinct := map[uint16]bool{}
	for _, mp := range got.ports {
		distinct[mp] = true
	}
	if len(distinct) != len(got.ports) || len(got.ports) > span || len(got.other) > 0 {
		t.Errorf("%d flows masqueraded from %d distinct ports (at most %d), others %.3v", len(got.ports), len(distinct), span, got.other)
	}
	if got.dropped != n-len(got.ports) || drops.NoMasqueradePort != uint64(got.dropped) {
		t.Errorf("%d flows dropped, %d counted, want the %d not masqueraded", got.dropped, drops.NoMasqueradePort, n-len(got.ports))
	}
	// The kernel's bounded search gives up before the very last ports.
	if len(got.ports) < span*95/100 {
		t.Errorf("only %d of %d ports used before flows were dropped", len(got.ports), span)
	}
	if entries := ctEntries(t, r.p); entries != 2*len(got.ports) {
		t.Errorf("%d table entries, want 2 for each of the %d masqueraded flows", entries, len(got.ports))
	}
}

// TestKernelMasqueradeQuietReplies: a flow whose client keeps sending
// while its endpoint has not answered for longer than the reply entry's
// timeout is alive, as the kernel's conntrack keeps a flow while packets
// go either way: its masquerade port is not given to a new flow, and a
// late reply still reaches its client.
func TestKernelMasqueradeQuietReplies(t *testing.T) {
	r := masqRig(t)
	old := r.openFlows(t, portRange(2000, 3000))
	if len(old.ports) != 3000 {
		t.Errorf("%d of 3000 flows masqueraded", len(old.ports))
	}
	// Every reply entry aged past UDP's 30 s, the forward entries fresh.
	for _, mp := range old.ports {
		k := ctKey{Src: r.epC.As4(), Dst: r.nodeIP.As4(), Sport: netPort(8080), Dport: netPort(mp), Proto: 17}
		must(t, ageEntry(r.p.kernel.coll.Maps[mapCT], k, 31*time.Second, func(*ctVal) {}))
	}
	taken := map[uint16]uint16{}
	for cp, mp := range old.ports {
		taken[mp] = cp
	}
	fresh := r.openFlows(t, portRange(20000, 3000))
	stolen := 0
	for cp, mp := range fresh.ports {
		if prev, ok := taken[mp]; ok {
			stolen++
			if stolen <= 3 {
				t.Errorf("a new flow from port %d took masquerade port %d of the live flow from port %d", cp, mp, prev)
			}
		}
	}
	t.Logf("3000 new flows beside 3000 live ones whose replies are 31 s old: %d masqueraded, %d dropped, %d took a live flow's port",
		len(fresh.ports), fresh.dropped, stolen)
	late := 0
	for cp, mp := range old.ports {
		if r.replyFor(t, mp) == netip.AddrPortFrom(r.client, cp) {
			late++
		}
	}
	if late != len(old.ports) {
		t.Errorf("%d of %d late replies reached their client", late, len(old.ports))
	}
}

// TestKernelMasqueradeReplyEvicted: when the table evicts the reply entry
// of a masqueraded flow and keeps its forward one, the flow keeps its
// masquerade port: its reservation (np_snat) stays, so that new flows to
// the endpoint, however many, take every other port but not this one; the
// flow's packets are still forwarded from it, by tc and by XDP, without
// its reply entry, and its reply, which misses the table, is translated
// back to the client, its entry made again from the reservation.
func TestKernelMasqueradeReplyEvicted(t *testing.T) {
	r := masqRigWith(t, AccelerationNative)
	const cp = 2000
	mp := r.openFlows(t, []uint16{cp}).ports[cp]
	m := r.p.kernel.coll.Maps[mapCT]
	rk := ctKey{Src: r.epC.As4(), Dst: r.nodeIP.As4(), Sport: netPort(8080), Dport: netPort(mp), Proto: 17}
	f := maglev.Flow{Src: r.client, Dst: r.nodeIP, SrcPort: cp, DstPort: 30080, Protocol: 17}
	must(t, m.Delete(rk))

	others := r.openFlows(t, portRange(20000, 40000))
	for ocp, omp := range others.ports {
		if omp == mp {
			t.Errorf("a new flow from port %d took masquerade port %d of the flow whose reply entry was evicted", ocp, mp)
		}
	}
	t.Logf("reply entry evicted, then 40000 flows to the endpoint: %d masqueraded, %d dropped", len(others.ports), others.dropped)
	if len(others.ports) < 36280*95/100 {
		t.Errorf("only %d other flows masqueraded: the test did not try the ports", len(others.ports))
	}

	verdict, out := r.runTC(t, r.a0, packetFlags(f, 0))
	if src, _ := tuple(out); verdict != tcRedirect || src != netip.AddrPortFrom(r.nodeIP, mp) {
		t.Errorf("np_ingress on the flow's packet without its reply entry: verdict %d from %v, want forwarded (%d) from port %d",
			verdict, src, tcRedirect, mp)
	}
	if verdict, out := r.runXDP(t, r.a0, checksummed(f, 0, true)); verdict != xdpTX && verdict != xdpRedirect {
		t.Errorf("np_xdp on the flow's packet without its reply entry: verdict %d, want it sent on", verdict)
	} else if src, _ := tuple(out); src != netip.AddrPortFrom(r.nodeIP, mp) {
		t.Errorf("np_xdp sent the flow's packet from %v, want port %d", src, mp)
	}
	var v ctVal
	if err := m.Lookup(rk, &v); err == nil {
		t.Errorf("the forward packets made a reply entry: %+v; the reply makes it", v)
	}
	if back := r.replyFor(t, mp); back != netip.AddrPortFrom(r.client, cp) {
		t.Errorf("the flow's reply, its entry evicted, went to %v, want the client's port %d", back, cp)
	}
	if err := m.Lookup(rk, &v); err != nil || v.Dst != r.client.As4() {
		t.Errorf("the reply did not make its entry again: %+v (%v)", v, err)
	}
}

// TestKernelMasqueradeSkipsKernelFlows: a port whose reply tuple a flow of
// the kernel's conntrack holds (a connection the rules masqueraded before
// the programs took over, still open) is not free. With every odd
// masquerade port to the endpoint held by such flows, new flows get even
// ones, and the kernel flows' replies are left to the stack.
func TestKernelMasqueradeSkipsKernelFlows(t *testing.T) {
	r := masqRig(t)
	var flows []kconntrack.Flow
	for p := 1025; p < 65536; p += 2 {
		if MasqueradePort(uint16(p)) {
			flows = append(flows, kconntrack.Flow{Proto: 17,
				Orig:  kconntrack.Tuple{Src: netip.AddrPortFrom(r.client, uint16(p)), Dst: netip.AddrPortFrom(r.nodeIP, 30080)},
				Reply: kconntrack.Tuple{Src: netip.AddrPortFrom(r.epC, 8080), Dst: netip.AddrPortFrom(r.nodeIP, uint16(p))}})
		}
	}
	r.createKernelFlow(t, proxy.IPv4, flows...)
	got := r.openFlows(t, portRange(40000, 200))
	odd := 0
	for _, mp := range got.ports {
		odd += int(mp % 2)
	}
	if len(got.ports) != 200 || odd != 0 {
		t.Errorf("200 new flows beside kernel flows on every odd masquerade port: %d masqueraded, %d of them from an odd port, %d dropped; want all from even ports",
			len(got.ports), odd, got.dropped)
	}
	if v, _ := r.runTC(t, r.c0, checksummed(maglev.Flow{Src: r.epC, Dst: r.nodeIP, SrcPort: 8080, DstPort: 30001, Protocol: 17}, 0, false)); v != tcOK {
		t.Errorf("a reply of a kernel flow: verdict %d, want it left to the stack (%d)", v, tcOK)
	}
}
