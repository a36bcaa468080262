package nodeport

import (
	"net/netip"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/cilium/ebpf"

	"github.com/svcproxy/svcproxy/pkg/pipeline/maglev"
	"github.com/svcproxy/svcproxy/pkg/proxy"
)

// The masquerade ports' reservations (np_snat) of the masqRig's flows.

// replyKey is the reply tuple of the rig's flow masqueraded from port mp.
func (r *xdpRig) replyKey(mp uint16) ctKey {
	return ctKey{Src: r.epC.As4(), Dst: r.nodeIP.As4(), Sport: netPort(8080), Dport: netPort(mp), Proto: 17}
}

// clientKey is the forward key of the rig's flow from client port cp.
func (r *xdpRig) clientKey(cp uint16) ctKey {
	return ctKey{Src: r.client.As4(), Dst: r.nodeIP.As4(), Sport: netPort(cp), Dport: netPort(30080), Proto: 17}
}

// endFlow deletes both entries of the flow from client port cp,
// masqueraded from mp, as the table's evictions would, and makes its
// reservation older than the grace a new one has.
func (r *xdpRig) endFlow(t *testing.T, cp, mp uint16) {
	t.Helper()
	ct := r.p.kernel.coll.Maps[mapCT]
	must(t, ct.Delete(r.clientKey(cp)))
	must(t, ct.Delete(r.replyKey(mp)))
	r.ageReservation(t, mp, 2*time.Second)
}

// ageReservation makes the reservation of masquerade port mp d old.
func (r *xdpRig) ageReservation(t *testing.T, mp uint16, d time.Duration) {
	t.Helper()
	snat := r.p.kernel.coll.Maps[mapSNAT]
	var v snatVal
	must(t, snat.Lookup(r.replyKey(mp), &v))
	now, err := monotonicNow()
	must(t, err)
	v.Since = now - uint64(d)
	must(t, snat.Update(r.replyKey(mp), v, ebpf.UpdateExist))
}

// reservation is the owner of masquerade port mp's reservation, and
// whether there is one.
func (r *xdpRig) reservation(mp uint16) (ctKey, bool) {
	var v snatVal
	err := r.p.kernel.coll.Maps[mapSNAT].Lookup(r.replyKey(mp), &v)
	return v.Owner, err == nil
}

// TestKernelMasqueradeStaleReservations: the reservation of a flow that
// is gone from the table (both entries evicted) no longer holds its port.
// The sweep deletes it, and keeps a live flow's and one too recent for
// its flow's entries to be written; a new flow's search that lands on one
// takes it over.
func TestKernelMasqueradeStaleReservations(t *testing.T) {
	r := masqRig(t)
	got := r.openFlows(t, portRange(2000, 100))
	if len(got.ports) != 100 {
		t.Fatalf("%d of 100 flows masqueraded", len(got.ports))
	}
	for cp := uint16(2000); cp < 2050; cp++ {
		r.endFlow(t, cp, got.ports[cp])
	}
	for cp := uint16(2050); cp < 2100; cp++ {
		r.ageReservation(t, got.ports[cp], 2*time.Second)
	}
	// A reservation just made, its owner's entry not written yet.
	recent := r.replyKey(1030)
	must(t, r.p.kernel.coll.Maps[mapSNAT].Update(recent, snatVal{Owner: r.clientKey(9), Since: mustNow(t)}, ebpf.UpdateNoExist))

	maps := r.p.kernel.coll.Maps
	freed, err := sweepSNAT[[4]byte](maps[mapCT], maps[mapSNAT], mustNow(t))
	must(t, err)
	if freed != 50 {
		t.Errorf("the sweep freed %d reservations, want the 50 of the ended flows", freed)
	}
	for cp, mp := range got.ports {
		owner, ok := r.reservation(mp)
		if ended := cp < 2050; ok == ended || (ok && owner != r.clientKey(cp)) {
			t.Errorf("after the sweep, port %d of the flow from port %d (ended: %v): reserved %v for %+v", mp, cp, ended, ok, owner)
		}
	}
	var v snatVal
	if err := maps[mapSNAT].Lookup(recent, &v); err != nil {
		t.Errorf("the sweep deleted a reservation younger than the grace: %v", err)
	}

	// Ten more flows end; new flows to the endpoint, trying every port,
	// take theirs over, and no live flow's.
	ended := map[uint16]uint16{}
	for cp := uint16(2050); cp < 2060; cp++ {
		r.endFlow(t, cp, got.ports[cp])
		ended[got.ports[cp]] = cp
	}
	fresh := r.openFlows(t, portRange(20000, 40000))
	takenOver := 0
	for ncp, mp := range fresh.ports {
		if _, ok := ended[mp]; ok {
			takenOver++
			if owner, _ := r.reservation(mp); owner != r.clientKey(ncp) {
				t.Errorf("port %d went to the flow from port %d, but its reservation names %+v", mp, ncp, owner)
			}
			continue
		}
		for cp := uint16(2060); cp < 2100; cp++ {
			if got.ports[cp] == mp {
				t.Errorf("a new flow from port %d took port %d of the live flow from port %d", ncp, mp, cp)
			}
		}
	}
	t.Logf("40000 new flows: %d masqueraded, %d dropped; %d of the 10 ended flows' ports taken over", len(fresh.ports), fresh.dropped, takenOver)
	if takenOver != len(ended) {
		t.Errorf("%d of the %d ended flows' reserved ports were taken over by new flows trying every port", takenOver, len(ended))
	}
}

// TestKernelSeedsReservationsFromAdoptedCT: a start over a conntrack
// table an older svcproxy filled, without np_snat, reserves each
// masqueraded flow's reply tuple: for the flow its live reply entry
// answers, and for a flow whose reply entry was evicted, unless another
// flow's reply entry holds that tuple: that flow has lost it, and its
// forward entry is deleted and counted (Drops.ReplyLost), as the older
// programs dropped its next packet.
func TestKernelSeedsReservationsFromAdoptedCT(t *testing.T) {
	r := masqRig(t)
	got := r.openFlows(t, []uint16{2000, 2001, 2002})
	ct := r.p.kernel.coll.Maps[mapCT]
	must(t, ct.Delete(r.replyKey(got.ports[2001])))
	other := ctVal{Src: r.nodeIP.As4(), Dst: netip.MustParseAddr("198.18.9.8").As4(), Sport: netPort(30080), Dport: netPort(4000),
		At: ctAtIngressFwd, Reply: 1, Seen: mustNow(t)}
	must(t, ct.Update(r.replyKey(got.ports[2002]), other, ebpf.UpdateExist))
	otherKey := ctKey{Src: other.Dst, Dst: other.Src, Sport: other.Dport, Dport: other.Sport, Proto: 17}
	// The older build: no np_snat.
	r.p.Close()
	must(t, os.Remove(filepath.Join(r.pins, pinName(mapSNAT))))

	r.p = r.proxier(t, "", "a0", "c0")
	r.sync(t, port("web", proxy.UDP, 30080, ep(r.epC, 8080)))
	r.p.background.Wait()
	for cp, want := range map[uint16]ctKey{2000: r.clientKey(2000), 2001: r.clientKey(2001), 2002: otherKey} {
		if owner, ok := r.reservation(got.ports[cp]); !ok || owner != want {
			t.Errorf("port %d of the flow from port %d: reserved %v for %+v, want for %+v", got.ports[cp], cp, ok, owner, want)
		}
	}
	var v ctVal
	if err := ct.Lookup(r.clientKey(2002), &v); err == nil {
		t.Errorf("the flow whose reply tuple another flow holds still has its forward entry: %+v", v)
	}
	drops, err := r.p.Drops(proxy.IPv4)
	must(t, err)
	if drops.ReplyLost != 1 {
		t.Errorf("%d flows counted as having lost their reply tuple, want 1", drops.ReplyLost)
	}
	if back := r.replyFor(t, got.ports[2001]); back != netip.AddrPortFrom(r.client, 2001) {
		t.Errorf("the reply of the flow whose reply entry was evicted went to %v, want the client's port 2001", back)
	}
	// The flow whose reply entry was evicted keeps its port.
	f := maglev.Flow{Src: r.client, Dst: r.nodeIP, SrcPort: 2001, DstPort: 30080, Protocol: 17}
	if verdict, out := r.runTC(t, r.a0, packetFlags(f, 0)); verdict != tcRedirect {
		t.Errorf("the flow's packet: verdict %d, want forwarded", verdict)
	} else if src, _ := tuple(out); src.Port() != got.ports[2001] {
		t.Errorf("the flow's packet left from %v, want port %d", src, got.ports[2001])
	}
}

func mustNow(t *testing.T) uint64 {
	t.Helper()
	now, err := monotonicNow()
	must(t, err)
	return now
}

// TestKernelIPv6MasqueradeReplyEvicted: as TestKernelMasqueradeReplyEvicted
// for IPv6 (np_snat6): a masqueraded flow's port is reserved for it, its
// packets are forwarded without its reply entry, and its reply, the entry
// evicted, goes back to the client.
func TestKernelIPv6MasqueradeReplyEvicted(t *testing.T) {
	r := newRig6(t)
	r.sync6(t, port("dns", proxy.UDP, 30053, ep(r.epC, 5353)))
	f := maglev.Flow{Src: r.client, Dst: r.nodeIP, SrcPort: 40000, DstPort: 30053, Protocol: 17}
	if ret, _ := r.runTC(t, r.a0, packet6(f, 0)); ret != tcRedirect {
		t.Fatalf("the client's first packet: verdict %d, want forwarded", ret)
	}
	fk := ctKeyOf[[16]byte]{Src: r.client.As16(), Dst: r.nodeIP.As16(), Sport: netPort(40000), Dport: netPort(30053), Proto: 17}
	maps := r.p.kernel.coll.Maps
	var fwd ctValOf[[16]byte]
	must(t, maps[maps6.ct].Lookup(fk, &fwd))
	rk := reverseOf(fwd, 17)
	var res snatValOf[[16]byte]
	if err := maps[maps6.snat].Lookup(rk, &res); err != nil || res.Owner != fk {
		t.Fatalf("the flow's reply tuple is not reserved for it: %+v (%v)", res, err)
	}
	must(t, maps[maps6.ct].Delete(rk))
	mp := netip.AddrPortFrom(r.nodeIP, uint16(fwd.Sport[0])<<8|uint16(fwd.Sport[1]))
	if ret, out := r.runTC(t, r.a0, packet6(f, 0)); ret != tcRedirect {
		t.Errorf("the flow's packet without its reply entry: verdict %d, want forwarded", ret)
	} else if src, _, _ := tuple6(out); src != mp {
		t.Errorf("the flow's packet without its reply entry left from %v, want %v", src, mp)
	}
	reply := maglev.Flow{Src: r.epC, Dst: r.nodeIP, SrcPort: 5353, DstPort: mp.Port(), Protocol: 17}
	ret, back := r.runTC(t, r.c0, packet6(reply, 0))
	if _, dst, _ := tuple6(back); ret != tcRedirect || dst != netip.AddrPortFrom(r.client, 40000) {
		t.Errorf("the reply, its entry evicted: verdict %d to %v, want forwarded to the client's port 40000", ret, dst)
	}
	if freed, err := sweepSNAT[[16]byte](maps[maps6.ct], maps[maps6.snat], mustNow(t)); err != nil || freed != 0 {
		t.Errorf("the sweep freed %d reservations (%v), want none: the flow lives", freed, err)
	}
}

// TestKernelSyncSweepsReservations: Sync sweeps np_snat when a sweep is
// due (a minute after the last), and not sooner while new flows found
// their ports.
func TestKernelSyncSweepsReservations(t *testing.T) {
	r := masqRig(t)
	sp := port("web", proxy.UDP, 30080, ep(r.epC, 8080))
	got := r.openFlows(t, portRange(2000, 10))
	for cp, mp := range got.ports {
		r.endFlow(t, cp, mp)
	}
	r.sync(t, sp)
	r.p.background.Wait()
	left := 0
	for _, mp := range got.ports {
		if _, ok := r.reservation(mp); ok {
			left++
		}
	}
	if left != len(got.ports) {
		t.Errorf("a sync right after the last sweep freed %d of %d ended flows' reservations, want none", len(got.ports)-left, len(got.ports))
	}
	r.p.swept = r.p.swept.Add(-snatSweepEvery)
	r.sync(t, sp)
	r.p.background.Wait()
	for cp, mp := range got.ports {
		if _, ok := r.reservation(mp); ok {
			t.Errorf("a sync a minute after the last sweep kept the reservation of the ended flow from port %d", cp)
		}
	}
}

// TestKernelMasqueradeReservationsFull: a new flow whose reservation finds
// np_snat full (of ended flows' reservations toward other endpoints, where
// no search of its lands) is dropped and counted as finding no port; the
// count brings the next sync's sweep forward, which frees them, and the
// next flow gets its port.
func TestKernelMasqueradeReservationsFull(t *testing.T) {
	r := masqRig(t)
	sp := port("web", proxy.UDP, 30080, ep(r.epC, 8080))
	snat := r.p.kernel.coll.Maps[mapSNAT]
	n := int(snat.MaxEntries())
	keys, vals := make([]ctKey, n), make([]snatVal, n)
	old := mustNow(t) - uint64(time.Minute)
	for i := range keys {
		keys[i] = ctKey{Src: [4]byte{198, 18, 7, byte(i >> 16)}, Dst: r.nodeIP.As4(), Sport: netPort(uint16(i)), Dport: netPort(1024), Proto: 17}
		vals[i] = snatVal{Owner: r.clientKey(uint16(i)), Since: old}
	}
	_, err := snat.BatchUpdate(keys, vals, nil)
	must(t, err)

	if got := r.openFlows(t, []uint16{2000}); got.dropped != 1 {
		t.Fatalf("a new flow with np_snat full: %+v, want it dropped", got)
	}
	drops, err := r.p.Drops(proxy.IPv4)
	must(t, err)
	if drops.NoMasqueradePort != 1 {
		t.Errorf("%d flows counted as finding no port, want 1", drops.NoMasqueradePort)
	}
	r.p.swept = r.p.swept.Add(-snatSweepSoonest)
	start := time.Now()
	r.sync(t, sp)
	synced := time.Since(start)
	r.p.background.Wait()
	t.Logf("the sync took %v; the sweep of %d stale reservations it started in the background, %v", synced, n, time.Since(start))
	if got := r.openFlows(t, []uint16{2001}); len(got.ports) != 1 {
		t.Errorf("a new flow after the sweep: %+v, want it masqueraded", got)
	}
}
