package nodeport

import (
	"context"
	"fmt"
	"net/netip"
	"runtime"
	"testing"
	"time"
	"unsafe"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"github.com/svcproxy/svcproxy/pkg/pipeline/maglev"
	"github.com/svcproxy/svcproxy/pkg/proxy"
)

// BenchmarkXDPForward times np_xdp (BPF_PROG_RUN, in the kernel) on the
// packets of established, masqueraded UDP flows to an endpoint on another
// node, each timed packet a different flow's in turn, as bench-nodeport
// sends them (UDP without a checksum). It runs with the conntrack table at
// its least size and at its largest, where a lookup's memory is spread
// over more pages:
//
//	go test ./pkg/pipeline/backends/ebpf/nodeport -run '^$' -bench XDPForward
func BenchmarkXDPForward(b *testing.B) {
	for _, c := range []struct {
		name      string
		endpoints int // the expected State's, which sizes the table
		size      int
	}{{"ct=least", 0, minCTEntries}, {"ct=largest", maxCTEntries, maxCTEntries}} {
		r := newXDPRig(b, AccelerationNative)
		if c.endpoints > 0 {
			// The maps are created at the first sync, sized from its
			// State; the other family's at the size it is expected to
			// have. An empty IPv6 State first makes the IPv4 table the
			// size of the expected endpoints'.
			r.p.ExpectSize(proxy.IPv4, proxy.ExpectedSize{EndpointPorts: c.endpoints})
			must(b, r.node.Do(func() error {
				return r.p.Sync(context.Background(), stateOf6(netip.MustParseAddr("fd00::1")), proxy.FullSync)
			}))
		}
		r.sync(b, port("web", proxy.UDP, 30080, ep(r.epC, 8080)))
		if got, want := r.p.kernel.coll.Maps[mapCT].MaxEntries(), uint32(c.size); got != want {
			b.Fatalf("the conntrack table holds %d entries, want %d", got, want)
		}
		pkts := r.openUDPFlows(b, 4096)
		xdp := r.p.kernel.coll.Programs[progXDP]
		b.Run(c.name, func(b *testing.B) {
			var sum time.Duration
			must(b, r.node.Do(func() error {
				for i := range b.N {
					ret, d, err := testRunXDP(xdp, pkts[i%len(pkts)], uint32(r.a0.Index))
					if err != nil {
						return err
					}
					if ret != xdpRedirect {
						return fmt.Errorf("np_xdp's verdict %d on a known flow's packet, want XDP_REDIRECT", ret)
					}
					sum += d
				}
				return nil
			}))
			b.ReportMetric(float64(sum.Nanoseconds())/float64(max(b.N, 1)), "ns/packet")
		})
	}
}

// openUDPFlows runs the first packet of n UDP flows from the rig's client
// to node port 30080 through np_ingress, as received on a0, and returns a
// later packet of each, UDP without a checksum.
func (r *xdpRig) openUDPFlows(b testing.TB, n int) [][]byte {
	tc := r.p.kernel.coll.Programs["np_ingress"]
	var pkts [][]byte
	must(b, r.node.Do(func() error {
		for i := range n {
			f := maglev.Flow{Src: r.client, Dst: r.nodeIP, SrcPort: uint16(10000 + i), DstPort: 30080, Protocol: 17}
			pkt := checksummed(f, 0, true)
			opts := &ebpf.RunOptions{Data: pkt, Context: tcContext{IngressIfindex: uint32(r.a0.Index)}}
			if verdict, err := tc.Run(opts); err != nil || verdict != tcRedirect {
				return fmt.Errorf("np_ingress on a new flow's packet: verdict %d (%v), want TC_ACT_REDIRECT", verdict, err)
			}
			pkts = append(pkts, pkt)
		}
		return nil
	}))
	return pkts
}

// testRunAttr is union bpf_attr's BPF_PROG_TEST_RUN part.
type testRunAttr struct {
	progFD, retval, dataSizeIn, dataSizeOut uint32
	dataIn, dataOut                         uint64
	repeat, duration                        uint32
	ctxSizeIn, ctxSizeOut                   uint32
	ctxIn, ctxOut                           uint64
	flags, cpu, batchSize                   uint32
	_                                       uint32
}

// testRunXDP runs the XDP program prog once over data as received on
// ifindex and returns its verdict and how long the kernel timed the run.
// (cilium/ebpf times a run only without a context, which XDP needs for
// the ingress interface.)
func testRunXDP(prog *ebpf.Program, data []byte, ifindex uint32) (uint32, time.Duration, error) {
	ctx := xdpContext{DataEnd: uint32(len(data)), IngressIfindex: ifindex}
	attr := testRunAttr{progFD: uint32(prog.FD()), dataSizeIn: uint32(len(data)),
		dataIn: uint64(uintptr(unsafe.Pointer(&data[0]))), repeat: 1,
		ctxSizeIn: uint32(unsafe.Sizeof(ctx)), ctxIn: uint64(uintptr(unsafe.Pointer(&ctx)))}
	_, _, errno := unix.Syscall(unix.SYS_BPF, unix.BPF_PROG_TEST_RUN, uintptr(unsafe.Pointer(&attr)), unsafe.Sizeof(attr))
	runtime.KeepAlive(data)
	runtime.KeepAlive(&ctx)
	if errno != 0 {
		return 0, 0, fmt.Errorf("BPF_PROG_TEST_RUN: %w", errno)
	}
	return attr.retval, time.Duration(attr.duration), nil
}
