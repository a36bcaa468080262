package nodeport

import (
	"context"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"github.com/svcproxy/svcproxy/pkg/pipeline/desired"
	"github.com/svcproxy/svcproxy/pkg/pipeline/maglev"
	"github.com/svcproxy/svcproxy/pkg/proxy"
)

// The verdicts of tc programs, as np_ingress returns them.
const (
	tcActOK   = 0
	tcActShot = 2
)

// verdict runs np_ingress over pkt and returns its verdict and where the
// packet went.
func verdict(prog *ebpf.Program, pkt []byte) (uint32, netip.AddrPort, error) {
	opts := &ebpf.RunOptions{Data: pkt, DataOut: make([]byte, 256)}
	ret, err := prog.Run(opts)
	if err != nil {
		return 0, netip.AddrPort{}, err
	}
	ip := opts.DataOut[14:]
	return ret, netip.AddrPortFrom(netip.AddrFrom4([4]byte(ip[16:20])), uint16(ip[22])<<8|uint16(ip[23])), nil
}

// TestKernelSourceRanges: a new flow to an LB IP with source ranges is
// translated from a source in a range and dropped from any other, as
// desired's verdicts say (Evaluate); the same port's node port does not
// check; ranges that did not parse drop every source. A restart finds the
// ranges in place.
func TestKernelSourceRanges(t *testing.T) {
	ns, pins := progNS(t)
	p := progProxier(t, pins, "node")
	lb := netip.MustParseAddr("198.18.200.1")
	x := ep(netip.MustParseAddr("198.19.1.2"), 8080)
	allowed, denied := netip.MustParseAddr("198.18.0.100"), netip.MustParseAddr("203.0.113.9")
	for _, closed := range []bool{false, true} {
		var sps []*desired.ServicePort
		for _, proto := range []proxy.Protocol{proxy.TCP, proxy.UDP} {
			sp := port("sourced-"+string(proto), proto, 30080, x)
			sp.LoadBalancerIPs = []netip.Addr{lb}
			sp.AllowedSources = []netip.Prefix{netip.MustParsePrefix("198.18.0.0/24")}
			if closed {
				sp.AllowedSources = []netip.Prefix{}
			}
			sps = append(sps, sp)
		}
		st := stateOf(nodeIP, sps...)
		must(t, ns.Do(func() error { return p.Sync(context.Background(), st, proxy.FullSync) }))
		// A restart reads the ranges back (an LPM trie, an entry at a
		// time) and writes nothing.
		again := progProxier(t, pins, "node")
		must(t, ns.Do(func() error { return again.Sync(context.Background(), st, proxy.FullSync) }))
		if again.Writes() != 0 {
			t.Errorf("closed %t: a restart with the same State wrote %d entries", closed, again.Writes())
		}
		again.Close()
		for _, sp := range sps {
			for _, c := range []struct {
				src, dst netip.Addr
				dport    uint16
			}{{allowed, lb, 80}, {denied, lb, 80}, {denied, nodeIP, 30080}} {
				f := maglev.Flow{Src: c.src, Dst: c.dst, SrcPort: 40000, DstPort: c.dport, Protocol: protoNumbers[sp.Protocol]}
				want := desired.Evaluate(st, desired.Packet{Source: c.src, Dest: c.dst, DestLocal: c.dst == nodeIP,
					Protocol: sp.Protocol, DestPort: c.dport})
				var ret uint32
				var got netip.AddrPort
				must(t, ns.Do(func() (err error) {
					if err = clearCT(p); err == nil {
						ret, got, err = verdict(p.kernel.coll.Programs["np_ingress"], packet(f))
					}
					return err
				}))
				switch {
				case want.Verdict == desired.Drop && ret != tcActShot:
					t.Errorf("closed %t: %s %v → %v:%d: verdict %d to %v, desired drops it", closed, sp.Protocol, c.src, c.dst, c.dport, ret, got)
				case want.Verdict == desired.DNAT && (ret != tcActOK || got != x.AddrPort()):
					t.Errorf("closed %t: %s %v → %v:%d: verdict %d to %v, desired sends it to %v", closed, sp.Protocol, c.src, c.dst, c.dport, ret, got, x)
				case want.Verdict != desired.Drop && want.Verdict != desired.DNAT:
					t.Errorf("desired's verdict %v for %v is not one this test expects", want.Verdict, f)
				}
			}
		}
	}
}

// TestKernelLocalFlowsUnmarked: every packet of a flow to a local
// endpoint leaves np_ingress with the mark it came with, whether desired
// masquerades the route (externalTrafficPolicy Cluster) or not (Local),
// though the State has a masquerade mark: no rules masquerade such a flow,
// and a mark would have nftables mode's rules, once they arrive on a switch
// of mode, masquerade the open flow midway, which resets it. The crafted
// packets' endpoint has no route out of a node interface: it is local.
func TestKernelLocalFlowsUnmarked(t *testing.T) {
	ns, pins := progNS(t)
	p := progProxier(t, pins, "node")
	const mark, other = 0x4000, 0x1
	x := ep(netip.MustParseAddr("198.19.1.2"), 8080)
	kept := netip.MustParseAddr("198.18.100.8")
	var sps []*desired.ServicePort
	for _, proto := range []proxy.Protocol{proxy.TCP, proxy.UDP} {
		cluster := port("cluster-"+string(proto), proto, 0, x)
		cluster.ExternalIPs = []netip.Addr{vip}
		local := port("local-"+string(proto), proto, 0, x)
		local.ExternalIPs, local.ExternalLocal = []netip.Addr{kept}, true
		sps = append(sps, cluster, local)
	}
	st := stateOf(nodeIP, sps...)
	st.Masquerade.Mark = mark
	must(t, ns.Do(func() error { return p.Sync(context.Background(), st, proxy.FullSync) }))
	prog := p.kernel.coll.Programs["np_ingress"]
	for _, sp := range sps {
		const want = other
		f := maglev.Flow{Src: netip.MustParseAddr("198.18.0.100"), Dst: sp.ExternalIPs[0], SrcPort: 40000, DstPort: 80,
			Protocol: protoNumbers[sp.Protocol]}
		for i, flags := range []byte{tcpSYN, tcpACK} {
			var dst netip.AddrPort
			var got uint32
			must(t, ns.Do(func() (err error) {
				dst, got, err = markedRun(prog, packetFlags(f, flags), other)
				return err
			}))
			if dst != x.AddrPort() || got != want {
				t.Errorf("%s (packet %d of the flow): went to %v with mark %#x, want %v with %#x", sp.Name, i+1, dst, got, x.AddrPort(), want)
			}
		}
	}
}

// The affinity table's layout, as bpf/nodeport.c declares it: only the
// tests read it.
type affKey struct {
	ID     uint64
	Client [4]byte
	Pad    uint32
}

type affVal struct {
	Addr [4]byte
	Port [2]byte
	Pad  [2]byte
	Seen uint64
}

// ageAffinity makes every affinity entry d old.
func ageAffinity(p *Proxier, d time.Duration) error {
	m, err := affinityMap(p)
	if err != nil {
		return err
	}
	var now unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &now); err != nil {
		return err
	}
	var k affKey
	var v affVal
	entries := map[affKey]affVal{}
	for it := m.Iterate(); it.Next(&k, &v); {
		v.Seen = uint64(now.Nano()) - uint64(d.Nanoseconds())
		entries[k] = v
	}
	if len(entries) == 0 {
		return fmt.Errorf("no affinity entry to age")
	}
	for k, v := range entries {
		if err := m.Update(k, v, ebpf.UpdateExist); err != nil {
			return err
		}
	}
	return nil
}

// TestKernelAffinity: with ClientIP affinity, a client's new flows keep
// the endpoint of its first while it opens them within the timeout (by
// Maglev too), and one whose entry is older than the timeout is balanced
// anew; a client whose endpoint left the Service goes to another and
// keeps that one. As the nftables rules' affinity sets behave.
func TestKernelAffinity(t *testing.T) {
	ns, pins := progNS(t)
	p := progProxier(t, pins, "node")
	eps := []proxy.Endpoint{ep(netip.MustParseAddr("198.19.1.2"), 8080), ep(netip.MustParseAddr("198.19.1.6"), 8080),
		ep(netip.MustParseAddr("198.19.1.10"), 8080)}
	client := netip.MustParseAddr("198.18.0.100")
	sport := uint16(40000)
	// flows opens n new flows from client and returns the endpoints they
	// went to; age, when set, ages the client's entry before each.
	flows := func(n int, age time.Duration) map[netip.AddrPort]int {
		seen := map[netip.AddrPort]int{}
		must(t, ns.Do(func() error {
			for range n {
				if age > 0 {
					if err := ageAffinity(p, age); err != nil {
						return err
					}
				}
				sport++
				f := maglev.Flow{Src: client, Dst: vip, SrcPort: sport, DstPort: 80, Protocol: 6}
				got, err := translated(p.kernel.coll.Programs["np_ingress"], f)
				if err != nil {
					return err
				}
				seen[got]++
			}
			return nil
		}))
		return seen
	}
	sync := func(balancing proxy.Balancing, eps ...proxy.Endpoint) {
		sp := external(proxy.TCP, eps...)
		sp.AffinitySeconds, sp.ExternalBalancing = 10, balancing
		syncIn(t, ns, p, sp)
	}
	for _, b := range []proxy.Balancing{proxy.BalanceRandom, proxy.BalanceMaglev} {
		sync(b, eps...)
		must(t, ns.Do(func() error { return clearAffinity(p) }))
		first := flows(20, 0)
		if len(first) != 1 || !slices.ContainsFunc(eps, func(e proxy.Endpoint) bool { return e.AddrPort() == only(first) }) {
			t.Fatalf("%v: 20 flows within the timeout went to %v, want one endpoint", b, first)
		}
		if got := flows(5, 9*time.Second); !maps.Equal(got, map[netip.AddrPort]int{only(first): 5}) {
			t.Errorf("%v: flows 9 s after the last went to %v, want %v", b, got, only(first))
		}
		if got := flows(30, 11*time.Second); len(got) < 2 {
			t.Errorf("%v: 30 flows each 11 s after the last (timeout 10 s) all went to %v, want balanced anew", b, got)
		}
		// The client's endpoint leaves: its next flow goes elsewhere, and
		// stays there.
		last := only(flows(1, 0))
		var rest []proxy.Endpoint
		for _, e := range eps {
			if e.AddrPort() != last {
				rest = append(rest, e)
			}
		}
		sync(b, rest...)
		after := flows(20, 0)
		if len(after) != 1 || after[last] != 0 {
			t.Errorf("%v: after %v left, 20 flows went to %v, want one other endpoint", b, last, after)
		}
	}
}

// only is the one key of m.
func only(m map[netip.AddrPort]int) netip.AddrPort {
	for k := range m {
		return k
	}
	return netip.AddrPort{}
}

func affinityMap(p *Proxier) (*ebpf.Map, error) {
	m, ok := p.kernel.coll.Maps[mapAffinity]
	if !ok {
		return nil, fmt.Errorf("no map %s", mapAffinity)
	}
	return m, nil
}

func clearAffinity(p *Proxier) error {
	m, err := affinityMap(p)
	if err != nil {
		return err
	}
	return clearMap[affKey, affVal](m)
}
