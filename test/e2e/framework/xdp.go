package framework

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"path/filepath"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"
)

// XDPAttached reports whether node n's svcproxy pinned np_xdp's link on
// iface: acceleration took effect there.
func (c *Cluster) XDPAttached(n *Node, iface string) bool {
	if n.ebpf == nil {
		return false
	}
	_, err := os.Stat(c.tcLinkPin(n, "np_xdp", iface))
	return err == nil
}

func (c *Cluster) tcLinkPin(n *Node, prog, iface string) string {
	return filepath.Join(n.ebpf.pins, "tc", "link_"+prog+"_"+iface)
}

// EnableBPFStats turns the kernel's run counts of BPF programs on until
// the returned closer is closed (BPF_ENABLE_STATS: the count stops when
// the last holder lets go, unlike the kernel.bpf_stats_enabled sysctl,
// which would outlive a killed test). Programs count only while it is on.
func EnableBPFStats() (io.Closer, error) {
	s, err := ebpf.EnableStats(uint32(unix.BPF_STATS_RUN_TIME))
	if err != nil {
		return nil, fmt.Errorf("enabling BPF run counts: %w", err)
	}
	return s, nil
}

// XDPCounts are run counts of the programs on one node interface, read
// while BPF stats are on.
type XDPCounts struct {
	XDP, Ingress uint64 // np_xdp's runs, np_ingress's (tc ingress) runs
}

// Forwarded is how many packets np_xdp kept from tc: it either passes a
// packet on to tc ingress or sends it out itself (XDP_TX, a redirect),
// and on a veth every packet tc ingress sees went through XDP first. So
// the runs of np_xdp that np_ingress did not see are the packets XDP
// forwarded.
func (x XDPCounts) Forwarded() int64 { return int64(x.XDP) - int64(x.Ingress) }

// Sub is x less an earlier reading.
func (x XDPCounts) Sub(before XDPCounts) XDPCounts {
	return XDPCounts{XDP: x.XDP - before.XDP, Ingress: x.Ingress - before.Ingress}
}

// ReadXDPCounts reads the run counts of np_xdp and np_ingress on node n's
// iface through their pinned links. np_xdp is read first: a packet that
// arrives between the two reads adds to np_ingress's count alone, so
// traffic during the read can only make Forwarded smaller, never larger.
func (c *Cluster) ReadXDPCounts(n *Node, iface string) (XDPCounts, error) {
	if n.ebpf == nil {
		return XDPCounts{}, fmt.Errorf("%s is not in ebpf mode", n.Name)
	}
	xdp, err := linkRunCount(c.tcLinkPin(n, "np_xdp", iface))
	if err != nil {
		return XDPCounts{}, err
	}
	ingress, err := linkRunCount(c.tcLinkPin(n, "np_ingress", iface))
	return XDPCounts{XDP: xdp, Ingress: ingress}, err
}

// linkRunCount is the run count of the program behind the link pinned at
// pin.
func linkRunCount(pin string) (uint64, error) {
	lk, err := link.LoadPinnedLink(pin, nil)
	if err != nil {
		return 0, fmt.Errorf("opening link %s: %w", pin, err)
	}
	defer lk.Close()
	li, err := lk.Info()
	if err != nil {
		return 0, fmt.Errorf("link %s: %w", pin, err)
	}
	prog, err := ebpf.NewProgramFromID(li.Program)
	if err != nil {
		return 0, fmt.Errorf("program of link %s: %w", pin, err)
	}
	defer prog.Close()
	st, err := prog.Stats()
	if err != nil {
		return 0, fmt.Errorf("program of link %s: %w", pin, err)
	}
	return st.RunCount, nil
}

// takeXDPFrames makes dev, a node link's peer on the bridge, the wire XDP
// on the node's eth0 sends frames onto (XDP_TX):
//   - a veth hands such frames to its peer only when the peer runs in NAPI
//     mode, and after XDP_TX it wakes the peer's NAPI only if the peer has
//     an XDP program (veth_xdp_flush): with GRO alone the frames wait in
//     the peer's ring, and once its 256 slots are full they are dropped
//     (xdp_tx_errors). The peer gets an XDP program of its own that passes
//     every frame on, as the test cluster's bridge ports do
//     (pkg/testing/xdppass in the main module);
//   - a node's NIC receives packets with full L4 checksums, while a veth
//     carries a local sender's partial one (CHECKSUM_PARTIAL) across, which
//     np_xdp leaves to tc: dev's transmit checksumming is off, so whatever
//     the bridge sends to the node has its checksum computed, as on a wire,
//     and XDP forwards it.
func (c *Cluster) takeXDPFrames(dev string) error {
	if _, err := InNS(context.Background(), c.NS("net"), "ethtool", "-K", dev, "tx", "off"); err != nil {
		return err
	}
	if c.xdpPass == nil {
		prog, err := ebpf.NewProgram(&ebpf.ProgramSpec{Name: "xdp_pass", Type: ebpf.XDP, License: "GPL",
			Instructions: asm.Instructions{asm.Mov.Imm(asm.R0, xdpPass), asm.Return()}})
		if err != nil {
			return fmt.Errorf("loading an XDP program that passes every frame: %w", err)
		}
		c.xdpPass = prog
	}
	var lk link.Link
	var attachErr error
	if err := inNetns(c.NS("net"), func() {
		var ifc *net.Interface
		if ifc, attachErr = net.InterfaceByName(dev); attachErr == nil {
			lk, attachErr = link.AttachXDP(link.XDPOptions{Program: c.xdpPass, Interface: ifc.Index, Flags: link.XDPDriverMode})
		}
	}); err != nil {
		return err
	}
	if attachErr != nil {
		return fmt.Errorf("XDP on %s: %w", dev, attachErr)
	}
	c.xdpLinks = append(c.xdpLinks, lk)
	return nil
}

// xdpPass is XDP_PASS, the verdict that hands a frame to the stack.
const xdpPass = 2

// teardownXDP releases the peers' XDP links and program (their namespace
// is gone by then, and the links with its devices).
func (c *Cluster) teardownXDP() {
	for _, lk := range c.xdpLinks {
		lk.Close()
	}
	if c.xdpPass != nil {
		c.xdpPass.Close()
	}
}

// TCFlowsTo counts the flows to dst in the conntrack table of node n's tc
// programs (np_ct, or np_ct6 for an IPv6 dst): the connections tc
// translated, not the rules. A table entry's key is a direction as its
// packets carry it: source, destination address, source, destination
// port (network order), protocol, padding.
func (c *Cluster) TCFlowsTo(n *Node, dst netip.AddrPort) (int, error) {
	if n.ebpf == nil {
		return 0, fmt.Errorf("%s is not in ebpf mode", n.Name)
	}
	name := "np_ct"
	if dst.Addr().Is6() {
		name = "np_ct6"
	}
	m, err := ebpf.LoadPinnedMap(filepath.Join(n.ebpf.pins, "tc", name), nil)
	if err != nil {
		return 0, err
	}
	defer m.Close()
	addr := dst.Addr().AsSlice()
	k, v := make([]byte, m.KeySize()), make([]byte, m.ValueSize())
	flows := 0
	it := m.Iterate()
	for it.Next(&k, &v) {
		d := k[len(addr) : 2*len(addr)]
		port := binary.BigEndian.Uint16(k[2*len(addr)+2:])
		if bytes.Equal(d, addr) && port == dst.Port() {
			flows++
		}
	}
	return flows, it.Err()
}
