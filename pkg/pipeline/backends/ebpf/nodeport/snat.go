package nodeport

import (
	"errors"
	"fmt"
	"time"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"
	"k8s.io/klog/v2"

	"github.com/svcproxy/svcproxy/pkg/proxy"
)

// A flow masqueraded to an endpoint on another node reserves its reply
// tuple (the endpoint, the masquerade address and port) in np_snat, a hash
// map the programs never evict from, so that the port stays the flow's
// while the flow lives whatever np_ct, an LRU, evicts
// (docs/design/0016-masquerade-port-reservations.md). The programs take
// over a reservation whose flow is gone when a new flow's port search
// lands on it; svcproxy takes back the others (sweepSNAT), and seeds the
// reservations of the flows an older svcproxy made (seedSNAT).

// snatValOf is a reservation: the forward key of the flow that owns the
// reply tuple, and since when (the programs' clock).
type snatValOf[A addrBytes] struct {
	Owner ctKeyOf[A]
	Since uint64
}

type snatVal = snatValOf[[4]byte]

// snatGrace is bpf/masq.h's SNAT_GRACE_NS: a reservation younger than it
// is its flow's whatever np_ct says, as the flow's forward entry is
// written just after it.
const snatGrace = uint64(time.Second)

// ctAtIngressFwd is bpf/nodeport.c's CT_AT_INGRESS_FWD, and ctClosing
// CT_CLOSING.
const (
	ctAtIngressFwd = 1
	ctClosing      = 2
)

// ctTimeout is bpf/ct.h's ct_timeout: how long an entry of protocol proto
// in state lives without a packet.
func ctTimeout(proto, state uint8) uint64 {
	s := uint64(60)
	switch {
	case proto == unix.IPPROTO_TCP && state == ctEstablished:
		s = 86400
	case proto == unix.IPPROTO_TCP && state == ctClosing:
		s = 120
	case proto == unix.IPPROTO_TCP && state == ctClosed:
		s = 10
	case proto != unix.IPPROTO_TCP && state == ctEstablished:
		s = 120
	case proto != unix.IPPROTO_TCP:
		s = 30
	}
	return s * uint64(time.Second)
}

func ctExpired[A addrBytes](proto uint8, v ctValOf[A], now uint64) bool {
	return now > v.Seen && now-v.Seen > ctTimeout(proto, v.State)
}

// reverseOf is the key of the other direction of the flow whose entry is v.
func reverseOf[A addrBytes](v ctValOf[A], proto uint8) ctKeyOf[A] {
	return ctKeyOf[A]{Src: v.Dst, Dst: v.Src, Sport: v.Dport, Dport: v.Sport, Proto: proto}
}

// rewritesTo is bpf/ct.h's rewrites_to: o rewrites a packet back to k's
// reverse.
func rewritesTo[A addrBytes](o ctValOf[A], k ctKeyOf[A]) bool {
	return o.Src == k.Dst && o.Dst == k.Src && o.Sport == k.Dport && o.Dport == k.Sport
}

// ctLive is bpf/ct.h's live: entry k, v of ct is a live flow's.
func ctLive[A addrBytes](ct *ebpf.Map, k ctKeyOf[A], v ctValOf[A], now uint64) bool {
	if !ctExpired(k.Proto, v, now) {
		return true
	}
	var o ctValOf[A]
	return ct.Lookup(reverseOf(v, k.Proto), &o) == nil && rewritesTo(o, k) && !ctExpired(k.Proto, o, now)
}

// masqueraded says whether k, v is an entry of a flow masqueraded to
// another node, and returns its reply tuple and its forward key.
func masqueraded[A addrBytes](k ctKeyOf[A], v ctValOf[A]) (rk, fk ctKeyOf[A], ok bool) {
	if v.At != ctAtIngressFwd {
		return rk, fk, false
	}
	if v.Reply != 0 {
		// The reply entry: sent to the masquerade address, not the client.
		return k, reverseOf(v, k.Proto), k.Dst != v.Dst
	}
	return reverseOf(v, k.Proto), k, v.Src != k.Src
}

// holdsReservation is bpf/masq.h's reserved: r, the reservation of reply
// tuple rk, still holds it for its owner.
func holdsReservation[A addrBytes](ct *ebpf.Map, rk ctKeyOf[A], r snatValOf[A], now uint64) bool {
	if now < r.Since || now-r.Since < snatGrace {
		return true
	}
	var f ctValOf[A]
	if ct.Lookup(r.Owner, &f) != nil {
		return false
	}
	return f.Reply == 0 && f.At == ctAtIngressFwd && rewritesTo(f, rk) && ctLive(ct, r.Owner, f, now)
}

// seedSNAT reserves the reply tuples of the masqueraded flows of ct that
// snat does not reserve: an older svcproxy made them without np_snat (or
// left np_snat behind unread). The flow a live reply entry answers owns
// its tuple; a flow whose reply entry was evicted keeps its port unless
// another flow holds it, and then it has lost its reply tuple and is
// deleted from ct (the older programs dropped its next packet and ended
// it; these forward its packets without a look at the reply tuple). It
// returns how many flows it deleted so.
func seedSNAT[A addrBytes](ct, snat *ebpf.Map, now uint64) (int, error) {
	var (
		k       ctKeyOf[A]
		v       ctValOf[A]
		replies = map[ctKeyOf[A]]ctKeyOf[A]{}
		fwds    = map[ctKeyOf[A]]ctKeyOf[A]{}
	)
	it := ct.Iterate()
	for it.Next(&k, &v) {
		if rk, fk, ok := masqueraded(k, v); ok && v.Reply != 0 && ctLive(ct, k, v, now) {
			replies[rk] = fk
		} else if ok && v.Reply == 0 {
			fwds[fk] = rk
		}
	}
	if err := it.Err(); err != nil {
		return 0, err
	}
	for rk, fk := range replies {
		if err := reserve(ct, snat, rk, fk, now); err != nil {
			return 0, err
		}
	}
	lost := 0
	for fk, rk := range fwds {
		var r snatValOf[A]
		if snat.Lookup(rk, &r) == nil && r.Owner != fk && holdsReservation(ct, rk, r, now) {
			if err := ct.Delete(fk); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
				return lost, err
			}
			lost++
			continue
		}
		if err := reserve(ct, snat, rk, fk, now); err != nil {
			return lost, err
		}
	}
	return lost, nil
}

// reserve makes rk's reservation fk's, unless a reservation that still
// holds names another flow (the programs made it since).
func reserve[A addrBytes](ct, snat *ebpf.Map, rk, fk ctKeyOf[A], now uint64) error {
	var r snatValOf[A]
	if snat.Lookup(rk, &r) == nil && (r.Owner == fk || holdsReservation(ct, rk, r, now)) {
		return nil
	}
	return snat.Update(rk, snatValOf[A]{Owner: fk, Since: now}, ebpf.UpdateAny)
}

// sweepSNAT deletes the reservations of snat that no longer hold their
// reply tuple (their flow is gone from ct, or ended) and returns how many.
// The programs take such a reservation over only when a port search lands
// on it; in the port spaces no new flow searches (an endpoint that went
// away, a quiet one), the sweep frees them, so that np_snat, sized as ct,
// does not fill up with flows ct evicted.
func sweepSNAT[A addrBytes](ct, snat *ebpf.Map, now uint64) (int, error) {
	var (
		rk    ctKeyOf[A]
		r     snatValOf[A]
		stale = map[ctKeyOf[A]]snatValOf[A]{}
	)
	it := snat.Iterate()
	for it.Next(&rk, &r) {
		if !holdsReservation(ct, rk, r, now) {
			stale[rk] = r
		}
	}
	if err := it.Err(); err != nil {
		return 0, err
	}
	freed := 0
	for rk, r := range stale {
		// The programs may have taken it over since: a new owner, or a
		// newer time.
		var cur snatValOf[A]
		if snat.Lookup(rk, &cur) != nil || cur != r {
			continue
		}
		if err := snat.Delete(rk); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			return freed, err
		}
		freed++
	}
	return freed, nil
}

// The sweep's pace: Sync sweeps at most every snatSweepEvery, or after
// snatSweepSoonest when new flows found no port since the last sweep (a
// full np_snat among the reasons).
const (
	snatSweepEvery   = time.Minute
	snatSweepSoonest = 5 * time.Second
)

// seedReservations seeds both families' np_snat from their np_ct
// (seedSNAT) once a start has loaded the programs, and counts the flows
// that lost their reply tuple among the drops (Drops.ReplyLost). It runs
// in the background (inBackground): a large np_ct takes seconds to read,
// and until then a flow's live reply entry keeps its port as before.
func (p *Proxier) seedReservations() {
	err := p.inBackground(func(maps map[string]*ebpf.Map) {
		now, err := monotonicNow()
		if err != nil {
			klog.ErrorS(err, "Could not reserve the masquerade ports of the flows the tc programs hold")
			return
		}
		for _, f := range []struct {
			names familyMaps
			seed  func(ct, snat *ebpf.Map, now uint64) (int, error)
			stats string
		}{{maps4, seedSNAT[[4]byte], mapStats}, {maps6, seedSNAT[[16]byte], mapStats6}} {
			lost, err := f.seed(maps[f.names.ct], maps[f.names.snat], now)
			if err == nil && lost > 0 {
				err = addPerCPU(maps[f.stats], statReplyLost, uint64(lost))
			}
			if err != nil {
				klog.ErrorS(err, "Could not reserve the masquerade ports of the flows the tc programs hold", "map", f.names.snat)
			}
		}
	})
	if err != nil {
		klog.ErrorS(err, "Could not reserve the masquerade ports of the flows the tc programs hold")
	}
}

// sweepReservations starts sweepSNAT on both families in the background
// when it is due at now and no sweep runs.
func (p *Proxier) sweepReservations(now time.Time) {
	since := now.Sub(p.swept)
	var noPort [2]uint64
	for i, family := range []proxy.IPFamily{proxy.IPv4, proxy.IPv6} {
		d, err := p.dropsLocked(family)
		if err != nil {
			return
		}
		noPort[i] = d.NoMasqueradePort
	}
	if since < snatSweepSoonest || (since < snatSweepEvery && noPort == p.sweptNoPort) {
		return
	}
	if !p.sweepBusy.CompareAndSwap(false, true) {
		return
	}
	p.swept, p.sweptNoPort = now, noPort
	err := p.inBackground(func(maps map[string]*ebpf.Map) {
		defer p.sweepBusy.Store(false)
		mono, err := monotonicNow()
		if err != nil {
			return
		}
		for _, f := range []struct {
			names familyMaps
			sweep func(ct, snat *ebpf.Map, now uint64) (int, error)
		}{{maps4, sweepSNAT[[4]byte]}, {maps6, sweepSNAT[[16]byte]}} {
			if _, err := f.sweep(maps[f.names.ct], maps[f.names.snat], mono); err != nil {
				klog.ErrorS(err, "Could not free the masquerade ports of ended flows", "map", f.names.snat)
			}
		}
	})
	if err != nil {
		p.sweepBusy.Store(false)
		klog.ErrorS(err, "Could not free the masquerade ports of ended flows")
	}
}

// backgroundMaps are the maps the background work reads and writes.
var backgroundMaps = []string{maps4.ct, maps4.snat, maps6.ct, maps6.snat, mapStats, mapStats6}

// inBackground runs work beside the syncs, which it does not hold up, on
// descriptors of its own of backgroundMaps (the programs share the maps;
// a load that replaced them leaves it working on maps no longer used).
// Close waits for it. The caller holds p.mu. Without the descriptors work
// does not run, and the error says why.
func (p *Proxier) inBackground(work func(maps map[string]*ebpf.Map)) error {
	maps := map[string]*ebpf.Map{}
	closeAll := func() {
		for _, m := range maps {
			m.Close()
		}
	}
	for _, name := range backgroundMaps {
		m, err := p.kernel.coll.Maps[name].Clone()
		if err != nil {
			closeAll()
			return fmt.Errorf("opening %s: %w", name, err)
		}
		maps[name] = m
	}
	p.background.Add(1)
	go func() {
		defer p.background.Done()
		defer closeAll()
		work(maps)
	}()
	return nil
}

// addPerCPU adds n to the first CPU's value of key in m, a per-CPU array
// of counters only svcproxy writes at key.
func addPerCPU(m *ebpf.Map, key uint32, n uint64) error {
	var per []uint64
	if err := m.Lookup(key, &per); err != nil {
		return err
	}
	per[0] += n
	return m.Update(key, per, ebpf.UpdateExist)
}
