package nodeport

import (
	"context"
	"encoding/binary"
	"fmt"
	"maps"
	"math/rand/v2"
	"net/netip"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"github.com/svcproxy/svcproxy/pkg/pipeline/desired"
	"github.com/svcproxy/svcproxy/pkg/pipeline/maglev"
	"github.com/svcproxy/svcproxy/pkg/proxy"
	"github.com/svcproxy/svcproxy/pkg/testing/netnstest"
)

// The tests here run the programs on crafted packets (BPF_PROG_RUN)
// rather than through interfaces.

// allPrograms loads every program of the object, the test-only ones too.
func allPrograms(t *testing.T) *ebpf.Collection {
	netnstest.RequireKernel(t)
	spec, err := loadNodeport()
	must(t, err)
	must(t, setKernelConntrack(spec, kernelConntrackKfuncs()))
	for _, name := range []string{mapServices, mapBackends, mapMaglev, mapRanges, mapMembers, mapCT, mapAffinity} {
		spec.Maps[name].MaxEntries = minEntries
	}
	coll, err := ebpf.NewCollection(spec)
	must(t, err)
	t.Cleanup(func() { coll.Close() })
	return coll
}

// TestKernelVerifier loads every program on this kernel and reports how
// many instructions the verifier processed for each.
func TestKernelVerifier(t *testing.T) {
	progs := allPrograms(t).Programs
	for _, name := range slices.Sorted(maps.Keys(progs)) {
		info, err := progs[name].Info()
		must(t, err)
		n, ok := info.VerifiedInstructions()
		if !ok || n == 0 {
			t.Errorf("%s: no verified instruction count (%d, %v)", name, n, ok)
		}
		t.Logf("%-13s %5d instructions verified", name, n)
	}
}

// TestKernelHashesMatchGo: the C jhash2 and flow hash give the values
// pkg/pipeline/maglev pins, so that the tables svcproxy writes are indexed as
// Go computed them.
func TestKernelHashesMatchGo(t *testing.T) {
	progs := allPrograms(t).Programs
	for _, tc := range []struct {
		words []uint32
		seed  uint32
		want  uint32
	}{
		// maglev's TestHashesArePinned.
		{nil, 0, 0xdeadbeef},
		{[]uint32{1}, 0, 0x72a82a9b},
		{[]uint32{1, 2, 3, 4, 5}, 7, 0x5a4f3b1e},
	} {
		in := make([]byte, 4*(2+12))
		binary.NativeEndian.PutUint32(in, uint32(len(tc.words)))
		binary.NativeEndian.PutUint32(in[4:], tc.seed)
		for i, w := range tc.words {
			binary.NativeEndian.PutUint32(in[8+4*i:], w)
		}
		got, err := progs["jhash_run"].Run(&ebpf.RunOptions{Data: in})
		must(t, err)
		if got != tc.want {
			t.Errorf("C jhash2(%v, %d) = %#x, Go's is %#x", tc.words, tc.seed, got, tc.want)
		}
	}
	f := maglev.Flow{Src: netip.MustParseAddr("198.51.100.7"), Dst: netip.MustParseAddr("192.0.2.10"),
		SrcPort: 40000, DstPort: 443, Protocol: 6}
	got, err := progs["flow_hash_run"].Run(&ebpf.RunOptions{Data: packet(f)})
	must(t, err)
	if want := uint32(0x027c3498); got != want || maglev.FlowHash(f) != want {
		t.Errorf("C flow hash of %+v = %#x, Go's FlowHash %#x, pinned %#x", f, got, maglev.FlowHash(f), want)
	}
}

// packet is an Ethernet frame of f (TCP SYN or UDP), checksums left zero.
func packet(f maglev.Flow) []byte { return packetFlags(f, tcpSYN) }

const (
	tcpFIN = 0x01
	tcpSYN = 0x02
	tcpRST = 0x04
	tcpACK = 0x10
)

// packetFlags is packet with the given TCP flags.
func packetFlags(f maglev.Flow, flags byte) []byte {
	b := make([]byte, 14+20+20)
	binary.BigEndian.PutUint16(b[12:], 0x0800)
	ip := b[14:]
	ip[0], ip[8], ip[9] = 0x45, 64, f.Protocol
	binary.BigEndian.PutUint16(ip[2:], 40)
	src, dst := f.Src.As4(), f.Dst.As4()
	copy(ip[12:], src[:])
	copy(ip[16:], dst[:])
	l4 := ip[20:]
	binary.BigEndian.PutUint16(l4, f.SrcPort)
	binary.BigEndian.PutUint16(l4[2:], f.DstPort)
	if f.Protocol == 6 {
		l4[12], l4[13] = 5<<4, flags
	} else {
		binary.BigEndian.PutUint16(l4[4:], 20)
	}
	return b
}

// translated runs np_ingress over f and returns where the packet went.
func translated(prog *ebpf.Program, f maglev.Flow) (netip.AddrPort, error) {
	return translatedPacket(prog, packet(f))
}

func translatedPacket(prog *ebpf.Program, pkt []byte) (netip.AddrPort, error) {
	dst, _, err := markedRun(prog, pkt, 0)
	return dst, err
}

// skbContext is struct __sk_buff as BPF_PROG_RUN passes it in and out:
// the mark, the rest left zero.
type skbContext struct {
	Len, PktType, Mark uint32
	Rest               [192 - 12]byte
}

// markedRun runs prog over pkt on a buffer whose mark is in, and returns
// where the packet went and the buffer's mark after.
func markedRun(prog *ebpf.Program, pkt []byte, in uint32) (netip.AddrPort, uint32, error) {
	var out skbContext
	opts := &ebpf.RunOptions{Data: pkt, DataOut: make([]byte, 256), Context: skbContext{Mark: in}, ContextOut: &out}
	if _, err := prog.Run(opts); err != nil {
		return netip.AddrPort{}, 0, err
	}
	ip := opts.DataOut[14:]
	return netip.AddrPortFrom(netip.AddrFrom4([4]byte(ip[16:20])), binary.BigEndian.Uint16(ip[22:24])), out.Mark, nil
}

// vip is the external IP of the programs' tests.
var vip = netip.MustParseAddr("198.18.100.7")

// progNS is a network namespace for programs run on crafted packets, and
// a bpffs for their pins.
func progNS(t *testing.T) (*netnstest.NS, string) {
	netnstest.RequireKernel(t)
	ns, err := netnstest.New(t).NewNS("progs")
	must(t, err)
	return ns, netnstest.MountThrowaway(t, "bpf")
}

// progProxier is a Proxier attached to no interface, pinning in dir.
func progProxier(t *testing.T, pins, dir string) *Proxier {
	p, err := New(Options{PinDir: filepath.Join(pins, dir)})
	must(t, err)
	t.Cleanup(p.Close)
	return p
}

// external is a service port whose external IP is vip.
func external(proto proxy.Protocol, eps ...proxy.Endpoint) *desired.ServicePort {
	sp := port("web", proto, 0, eps...)
	sp.ExternalIPs = []netip.Addr{vip}
	return sp
}

// syncIn syncs p with a State of sp in ns.
func syncIn(t *testing.T, ns *netnstest.NS, p *Proxier, sp *desired.ServicePort) {
	t.Helper()
	must(t, ns.Do(func() error {
		return p.Sync(context.Background(), stateOf(netip.MustParseAddr("198.18.0.11"), sp), proxy.FullSync)
	}))
}

// TestKernelMaglev: two nodes with the same endpoints pick the same
// endpoint for every flow to an external IP (what ECMP in front of them
// needs), the one Go's table picks; removing one endpoint of ten moves
// its flows and few others.
func TestKernelMaglev(t *testing.T) {
	ns, pins := progNS(t)
	var eps []proxy.Endpoint
	for i := range 10 {
		eps = append(eps, ep(netip.AddrFrom4([4]byte{198, 19, byte(1 + i%2), byte(2 + 4*i)}), 8080))
	}
	rng := rand.New(rand.NewPCG(1, 2))
	flows := make([]maglev.Flow, 2000)
	for i := range flows {
		flows[i] = maglev.Flow{Src: netip.AddrFrom4([4]byte{198, 18, 0, byte(100 + rng.IntN(100))}), Dst: vip,
			SrcPort: uint16(1024 + rng.IntN(60000)), DstPort: 80, Protocol: 6}
	}
	nodes := []*Proxier{progProxier(t, pins, "node1"), progProxier(t, pins, "node2")}
	sync := func(p *Proxier, eps []proxy.Endpoint) {
		sp := external(proxy.TCP, eps...)
		sp.ExternalBalancing = proxy.BalanceMaglev
		syncIn(t, ns, p, sp)
	}
	picks := func(p *Proxier, eps []proxy.Endpoint) []netip.AddrPort {
		tab := maglev.New(eps)
		out := make([]netip.AddrPort, len(flows))
		must(t, ns.Do(func() error {
			for i, f := range flows {
				var err error
				if out[i], err = translated(p.kernel.coll.Programs["np_ingress"], f); err != nil {
					return err
				}
				if want, _ := tab.Lookup(maglev.FlowHash(f)); out[i] != want.AddrPort() {
					return fmt.Errorf("flow %+v went to %v, Go's table says %v", f, out[i], want)
				}
			}
			return nil
		}))
		return out
	}
	for _, p := range nodes {
		sync(p, eps)
	}
	before := [2][]netip.AddrPort{picks(nodes[0], eps), picks(nodes[1], eps)}
	if !slices.Equal(before[0], before[1]) {
		t.Errorf("the two nodes picked differently")
	}
	gone := eps[3].AddrPort()
	rest := slices.Delete(slices.Clone(eps), 3, 4)
	sync(nodes[0], rest)
	// The flows are new again: the conntrack table would keep them.
	must(t, ns.Do(func() error { return clearCT(nodes[0]) }))
	after := picks(nodes[0], rest)
	movedOthers, others := 0, 0
	for i := range flows {
		if before[0][i] == gone {
			continue
		}
		others++
		if after[i] != before[0][i] {
			movedOthers++
		}
	}
	share := float64(movedOthers) / float64(others)
	t.Logf("removing 1 of 10 endpoints: %d of %d other flows moved (%.2f %%)", movedOthers, others, 100*share)
	if share > 0.01 {
		t.Errorf("%.2f %% of the other endpoints' flows moved, want at most 1 %%", 100*share)
	}
}

func clearCT(p *Proxier) error { return clearMap[ctKey, ctVal](p.kernel.coll.Maps[mapCT]) }

// clearMap deletes every entry of m, a map of K to V.
func clearMap[K, V any](m *ebpf.Map) error {
	var k K
	var v V
	var keys []K
	it := m.Iterate()
	for it.Next(&k, &v) {
		keys = append(keys, k)
	}
	for _, k := range keys {
		if err := m.Delete(k); err != nil {
			return err
		}
	}
	return it.Err()
}

// TestKernelConntrackExpiry: a flow keeps its endpoint while its table
// entry lives, and picks anew once the entry is older than the kernel's
// conntrack would keep the flow in its state. Each case programs the
// flow to endpoint x, moves the Service to y, ages the flow's entry, and
// sends the flow's next packet.
func TestKernelConntrackExpiry(t *testing.T) {
	ns, pins := progNS(t)
	p := progProxier(t, pins, "node")
	x, y := ep(netip.MustParseAddr("198.19.1.2"), 8080), ep(netip.MustParseAddr("198.19.1.6"), 8080)
	const (
		stNew, stEstablished, stClosing, stClosed = 0, 1, 2, 3
	)
	for _, tc := range []struct {
		proto proxy.Protocol
		state uint8
		age   time.Duration
		kept  bool
	}{
		{proxy.TCP, stNew, 59 * time.Second, true},
		{proxy.TCP, stNew, 61 * time.Second, false},
		{proxy.TCP, stEstablished, 23 * time.Hour, true},
		{proxy.TCP, stEstablished, 25 * time.Hour, false},
		{proxy.TCP, stClosing, 119 * time.Second, true},
		{proxy.TCP, stClosing, 121 * time.Second, false},
		{proxy.TCP, stClosed, 9 * time.Second, true},
		{proxy.TCP, stClosed, 11 * time.Second, false},
		{proxy.UDP, stNew, 29 * time.Second, true},
		{proxy.UDP, stNew, 31 * time.Second, false},
		{proxy.UDP, stEstablished, 119 * time.Second, true},
		{proxy.UDP, stEstablished, 121 * time.Second, false},
	} {
		f := maglev.Flow{Src: netip.MustParseAddr("198.18.0.100"), Dst: vip, SrcPort: 40000, DstPort: 80,
			Protocol: protoNumbers[tc.proto]}
		syncIn(t, ns, p, external(tc.proto, x))
		var got [2]netip.AddrPort
		must(t, ns.Do(func() (err error) {
			if err = clearCT(p); err != nil {
				return err
			}
			prog := p.kernel.coll.Programs["np_ingress"]
			if got[0], err = translatedPacket(prog, packetFlags(f, tcpSYN)); err != nil {
				return err
			}
			if err := age(p, f, tc.state, tc.age); err != nil {
				return err
			}
			if err := p.Sync(context.Background(), stateOf(netip.MustParseAddr("198.18.0.11"), external(tc.proto, y)), proxy.FullSync); err != nil {
				return err
			}
			got[1], err = translatedPacket(prog, packetFlags(f, tcpACK))
			return err
		}))
		// An expired UDP flow is a new one; a TCP packet other than a SYN
		// without a live entry is the stack's (untranslated).
		want := y.AddrPort()
		switch {
		case tc.kept:
			want = x.AddrPort()
		case tc.proto == proxy.TCP:
			want = netip.AddrPortFrom(vip, 80)
		}
		if got[0] != x.AddrPort() || got[1] != want {
			t.Errorf("%s in state %d aged %v: went to %v then %v, want %v then %v", tc.proto, tc.state, tc.age, got[0], got[1], x.AddrPort(), want)
		}
	}
}

// TestKernelOnlyASYNStartsATCPFlow: a TCP packet other than a SYN, to a
// frontend, without an entry in the table (a connection the nftables rules
// translated before the programs were attached) goes to the stack as it
// came and leaves no entry; a SYN then starts a flow.
func TestKernelOnlyASYNStartsATCPFlow(t *testing.T) {
	ns, pins := progNS(t)
	p := progProxier(t, pins, "node")
	x := ep(netip.MustParseAddr("198.19.1.2"), 8080)
	syncIn(t, ns, p, external(proxy.TCP, x))
	f := maglev.Flow{Src: netip.MustParseAddr("198.18.0.100"), Dst: vip, SrcPort: 40001, DstPort: 80, Protocol: 6}
	front := netip.AddrPortFrom(vip, 80)
	must(t, ns.Do(func() error {
		prog := p.kernel.coll.Programs["np_ingress"]
		for _, flags := range []byte{tcpACK, tcpACK | tcpFIN, tcpRST, tcpACK | tcpRST, tcpSYN | tcpACK} {
			got, err := translatedPacket(prog, packetFlags(f, flags))
			if err != nil {
				return err
			}
			if got != front {
				t.Errorf("flags %#x without an entry: went to %v, want %v (untranslated)", flags, got, front)
			}
		}
		if n := ctEntries(t, p); n != 0 {
			t.Errorf("%d table entries after packets that start no flow, want 0", n)
		}
		got, err := translatedPacket(prog, packetFlags(f, tcpSYN))
		if err != nil {
			return err
		}
		if got != x.AddrPort() {
			t.Errorf("a SYN went to %v, want %v", got, x.AddrPort())
		}
		return nil
	}))
}

// ctEntries counts the conntrack table's entries.
func ctEntries(t *testing.T, p *Proxier) int {
	t.Helper()
	var (
		k ctKey
		v ctVal
		n int
	)
	it := p.kernel.coll.Maps["np_ct"].Iterate()
	for it.Next(&k, &v) {
		n++
	}
	must(t, it.Err())
	return n
}

// age sets the state of flow f's table entries, both directions, and
// makes them d old.
func age(p *Proxier, f maglev.Flow, state uint8, d time.Duration) error {
	m := p.kernel.coll.Maps[mapCT]
	k := ctKey{Src: f.Src.As4(), Dst: f.Dst.As4(), Sport: netPort(f.SrcPort), Dport: netPort(f.DstPort), Proto: f.Protocol}
	var v ctVal
	if err := m.Lookup(k, &v); err != nil {
		return fmt.Errorf("the flow's entry: %w", err)
	}
	other := ctKey{Src: v.Dst, Dst: v.Src, Sport: v.Dport, Dport: v.Sport, Proto: f.Protocol}
	setState := func(v *ctVal) { v.State = state }
	if err := ageEntry(m, k, d, setState); err != nil {
		return err
	}
	return ageEntry(m, other, d, setState)
}

// ageEntry makes the entry of k in the conntrack table m d old, edited
// by edit.
func ageEntry(m *ebpf.Map, k ctKey, d time.Duration, edit func(*ctVal)) error {
	var v ctVal
	if err := m.Lookup(k, &v); err != nil {
		return fmt.Errorf("the entry %+v: %w", k, err)
	}
	var now unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &now); err != nil {
		return err
	}
	v.Seen = uint64(now.Nano()) - uint64(d.Nanoseconds())
	edit(&v)
	return m.Update(k, v, ebpf.UpdateExist)
}

// BenchmarkIngress times np_ingress (BPF_PROG_RUN, in the kernel) on a TCP
// ACK to a frontend (KnownFlow) and on one no frontend matches, with 1 and
// 10,000 frontends in the maps. The table holds no flow for the ACK (only
// a SYN starts one, and a repeated run would see the packet as the first
// run rewrote it), so both time parsing and the lookups of a packet the
// programs pass on, not a rewrite;
// BenchmarkIngress6 the same for IPv6 (np_ingress hands it to np_ingress6):
//
//	go test ./pkg/pipeline/backends/ebpf/nodeport -run '^$' -bench Ingress
func BenchmarkIngress(b *testing.B) { benchIngress(b, proxy.IPv4) }

func BenchmarkIngress6(b *testing.B) { benchIngress(b, proxy.IPv6) }

// benchAddr is the benchmark's address of family for the IPv4 one v4: the
// same bytes under fd00::/16 for IPv6.
func benchAddr(family proxy.IPFamily, v4 netip.Addr) netip.Addr {
	if family == proxy.IPv4 {
		return v4
	}
	b4 := v4.As4()
	return netip.AddrFrom16([16]byte{0xfd, 0, 12: b4[0], 13: b4[1], 14: b4[2], 15: b4[3]})
}

func benchIngress(b *testing.B, family proxy.IPFamily) {
	netnstest.RequireKernel(b)
	ns, err := netnstest.New(b).NewNS("bench")
	must(b, err)
	pins := netnstest.MountThrowaway(b, "bpf")
	addr := func(s string) netip.Addr { return benchAddr(family, netip.MustParseAddr(s)) }
	state, pkt := stateOf, packetFlags
	if family == proxy.IPv6 {
		state, pkt = stateOf6, packet6
	}
	for _, n := range []int{1, 10000} {
		p, err := New(Options{PinDir: filepath.Join(pins, fmt.Sprint(n))})
		must(b, err)
		b.Cleanup(p.Close)
		var sps []*desired.ServicePort
		for i := range n {
			sp := port(fmt.Sprint("svc", i), proxy.TCP, 0, ep(addr("198.19.1.2"), 8080))
			sp.ExternalIPs = []netip.Addr{benchAddr(family, netip.AddrFrom4([4]byte{198, 18, byte(100 + i/250), byte(1 + i%250)}))}
			sps = append(sps, sp)
		}
		must(b, ns.Do(func() error {
			return p.Sync(context.Background(), state(addr("198.18.0.11"), sps...), proxy.FullSync)
		}))
		prog := p.kernel.coll.Programs["np_ingress"]
		known := maglev.Flow{Src: addr("198.18.0.100"), Dst: addr("198.18.100.1"), SrcPort: 40000, DstPort: 80, Protocol: 6}
		other := known
		other.Dst = addr("198.18.99.1")
		for _, c := range []struct {
			name string
			f    maglev.Flow
			// to is where the timed packet goes: an established flow's
			// is rewritten to its endpoint, a packet for no frontend is not.
			to netip.AddrPort
		}{
			{"KnownFlow", known, netip.AddrPortFrom(addr("198.19.1.2"), 8080)},
			{"NoFrontend", other, netip.AddrPortFrom(other.Dst, other.DstPort)},
		} {
			b.Run(fmt.Sprintf("%s/frontends=%d", c.name, n), func(b *testing.B) {
				data := pkt(c.f, tcpACK)
				var per time.Duration
				must(b, ns.Do(func() error {
					// The SYN makes the flow np_ct's, so that the ACKs timed
					// are the rewrite of a known flow.
					if _, err := prog.Run(&ebpf.RunOptions{Data: pkt(c.f, tcpSYN)}); err != nil {
						return err
					}
					if to, err := destinationAfter(prog, family, data); err != nil || to != c.to {
						return fmt.Errorf("the timed packet went to %v (%v), want %v", to, err, c.to)
					}
					d, err := perPacket(prog, data, b.N)
					per = d
					return err
				}))
				b.ReportMetric(float64(per.Nanoseconds()), "ns/packet")
			})
		}
	}
}

// perPacket is how long prog takes over data, the mean of n runs of one
// packet each as the kernel times them. A run of many repeats would not
// do: the kernel runs each repeat on the same buffer, so every packet after
// the first would meet the first one's rewrite.
func perPacket(prog *ebpf.Program, data []byte, n int) (time.Duration, error) {
	var sum time.Duration
	for range n {
		_, d, err := prog.Benchmark(data, 1, nil)
		if err != nil {
			return 0, err
		}
		sum += d
	}
	return sum / time.Duration(max(n, 1)), nil
}

// destinationAfter runs prog once over pkt of family and returns where
// the packet goes then.
func destinationAfter(prog *ebpf.Program, family proxy.IPFamily, pkt []byte) (netip.AddrPort, error) {
	opts := &ebpf.RunOptions{Data: pkt, DataOut: make([]byte, 256)}
	if _, err := prog.Run(opts); err != nil {
		return netip.AddrPort{}, err
	}
	ip := opts.DataOut[14:]
	if family == proxy.IPv4 {
		return netip.AddrPortFrom(netip.AddrFrom4([4]byte(ip[16:20])), binary.BigEndian.Uint16(ip[22:24])), nil
	}
	return netip.AddrPortFrom(netip.AddrFrom16([16]byte(ip[24:40])), binary.BigEndian.Uint16(ip[42:44])), nil
}
