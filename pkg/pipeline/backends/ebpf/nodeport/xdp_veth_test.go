package nodeport

import (
	"bufio"
	"context"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/svcproxy/svcproxy/pkg/proxy"
	"github.com/svcproxy/svcproxy/pkg/testing/netnstest"
	"github.com/svcproxy/svcproxy/pkg/testing/xdppass"
)

// TestKernelXDPLocalSenders: np_xdp on node1's fabric veth, the client and
// pod-b (on node2) senders on this machine whose veths leave checksums to
// the device (offload on, a veth's default). Their packets reach np_xdp
// with partial checksums: it hands them to tc, every request is answered,
// and no receiver counts a checksum error. With offload off on the
// senders' fabric links (complete checksums, as from a wire), np_xdp
// forwards the flows' packets itself, and every request is answered too.
func TestKernelXDPLocalSenders(t *testing.T) {
	r := newRig(t)
	// node1's frames sent back out of fab0 (XDP_TX) land on its bridge
	// port, which takes them only with an XDP program of its own.
	must(t, r.fabric.Do(func() error { return xdppass.Attach("f-node1") }))
	stats, err := ebpf.EnableStats(uint32(unix.BPF_STATS_RUN_TIME))
	must(t, err)
	defer stats.Close()
	p, err := New(Options{PinDir: filepath.Join(r.pins, "np"), Interfaces: []string{"fab0"}, Acceleration: AccelerationNative})
	must(t, err)
	t.Cleanup(p.Close)
	st := stateOf(r.node1.IPv4, port("web", proxy.TCP, 30080, r.ep(r.podB)), port("dns", proxy.UDP, 30081, r.ep(r.podB)))
	r.sync(t, p, st, proxy.RecoverySync)

	for _, tc := range []struct {
		name       string
		offloadOff []*netnstest.NS // whose fab0 completes checksums
		forwarded  bool            // whether np_xdp is to forward packets itself
	}{
		{"offload on: partial checksums go to tc", nil, false},
		{"offload off: complete checksums, forwarded by XDP", []*netnstest.NS{r.client.NS, r.node2.NS}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, ns := range tc.offloadOff {
				_, err := ns.Run(context.Background(), "ethtool", "-K", "fab0", "tx", "off")
				must(t, err)
			}
			before := xdpRuns(t, p)
			for _, proto := range []proxy.Protocol{proxy.TCP, proxy.UDP} {
				dst := netip.AddrPortFrom(r.node1.IPv4, 30080)
				if proto == proxy.UDP {
					dst = netip.AddrPortFrom(r.node1.IPv4, 30081)
				}
				seen := r.ask(t, proto, dst, 10, map[string]func(netip.AddrPort) bool{"pod-b": r.masqueraded})
				if seen["pod-b"] != 10 {
					t.Errorf("%s to %v: %d of 10 answered", proto, dst, seen["pod-b"])
				}
			}
			forwarded := xdpRuns(t, p).sub(before).forwarded()
			t.Logf("np_xdp forwarded %d packets itself", forwarded)
			if tc.forwarded && forwarded <= 0 {
				t.Errorf("np_xdp forwarded %d packets, want the flows' packets after their first", forwarded)
			}
			if !tc.forwarded && forwarded != 0 {
				t.Errorf("np_xdp forwarded %d packets with partial checksums, want 0 (all to tc)", forwarded)
			}
			for _, ns := range []*netnstest.NS{r.client.NS, r.podB.NS} {
				if n := csumErrors(t, ns); n != 0 {
					t.Errorf("%s counted %d TCP/UDP checksum errors", ns.Role, n)
				}
			}
		})
	}
}

// TestKernelVeths: of a veth, a bridge and a missing interface, Veths
// names the veth (the start-up warning of acceleration on a veth).
func TestKernelVeths(t *testing.T) {
	netnstest.RequireKernel(t)
	lab := netnstest.New(t)
	node, err := lab.NewNS("node")
	must(t, err)
	peer, err := lab.NewNS("peer")
	must(t, err)
	must(t, netnstest.Veth(node, "v0", peer, "v1"))
	var got []string
	must(t, node.Do(func() error {
		if err := netlink.LinkAdd(&netlink.Bridge{LinkAttrs: netlink.LinkAttrs{Name: "br0"}}); err != nil {
			return err
		}
		got = Veths([]string{"br0", "v0", "missing"})
		return nil
	}))
	if !slices.Equal(got, []string{"v0"}) {
		t.Errorf("Veths = %v, want [v0]", got)
	}
}

// runs are the run counts of np_xdp and np_ingress (BPF stats on). On a
// veth every packet tc ingress sees went through XDP first, so the runs
// of np_xdp that np_ingress did not see are the packets XDP forwarded.
type runs struct{ xdp, ingress uint64 }

func (r runs) sub(before runs) runs { return runs{r.xdp - before.xdp, r.ingress - before.ingress} }
func (r runs) forwarded() int64     { return int64(r.xdp) - int64(r.ingress) }

// xdpRuns reads np_xdp's count first: a packet arriving between the two
// reads can only make forwarded smaller.
func xdpRuns(t *testing.T, p *Proxier) runs {
	t.Helper()
	var out runs
	for _, c := range []struct {
		prog string
		to   *uint64
	}{{progXDP, &out.xdp}, {"np_ingress", &out.ingress}} {
		s, err := p.kernel.coll.Programs[c.prog].Stats()
		must(t, err)
		*c.to = s.RunCount
	}
	return out
}

// csumErrors is the sum of the Tcp and Udp InCsumErrors counters of ns.
func csumErrors(t *testing.T, ns *netnstest.NS) uint64 {
	t.Helper()
	var total uint64
	must(t, ns.Do(func() error {
		f, err := os.Open("/proc/thread-self/net/snmp")
		if err != nil {
			return err
		}
		defer f.Close()
		n, err := sumCounter(bufio.NewScanner(f), "InCsumErrors", "Tcp:", "Udp:")
		total = n
		return err
	}))
	return total
}

// sumCounter adds up the counter name of the given /proc/net/snmp groups
// (a line of names followed by a line of values, each led by the group).
func sumCounter(sc *bufio.Scanner, name string, groups ...string) (uint64, error) {
	var total uint64
	var header []string
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) == 0 || !slices.Contains(groups, fields[0]) {
			continue
		}
		if header == nil || header[0] != fields[0] {
			header = fields
			continue
		}
		for i, h := range header {
			if h == name && i < len(fields) {
				v, err := strconv.ParseUint(fields[i], 10, 64)
				if err != nil {
					return 0, fmt.Errorf("%s %s: %w", fields[0], name, err)
				}
				total += v
			}
		}
		header = nil
	}
	return total, sc.Err()
}
