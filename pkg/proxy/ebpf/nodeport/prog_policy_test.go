package nodeport

import (
	"context"
	"net/netip"
	"testing"

	"github.com/cilium/ebpf"

	"github.com/svcproxy/svcproxy/pkg/proxy"
	"github.com/svcproxy/svcproxy/pkg/proxy/desired"
	"github.com/svcproxy/svcproxy/pkg/proxy/maglev"
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
