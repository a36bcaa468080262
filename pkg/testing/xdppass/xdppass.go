// Package xdppass gives a test rig's veth the XDP program that lets it take
// the frames XDP on its peer sends back out (XDP_TX). A veth receives XDP
// frames into a ring that its NAPI instance empties; GRO, like an XDP
// program, turns that instance on. But after XDP_TX the sending veth wakes
// its peer's NAPI only when the peer has an XDP program (drivers/net/veth.c,
// veth_xdp_flush): with GRO alone, frames wait in the ring until other
// traffic wakes it, and once its 256 slots are full the sender counts
// xdp_tx_errors (ethtool -S) and drops them. A redirect wakes the peer
// either way. An XDP program of the peer's own, even one that passes every
// frame on, keeps it taking XDP_TX's frames.
package xdppass

import (
	"fmt"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netlink/nl"
)

// verdictPass is XDP_PASS, the verdict that hands a frame to the stack.
const verdictPass = 2

// Attach attaches, in driver mode, an XDP program passing every frame on
// to dev in the calling thread's network namespace. It is attached over
// netlink, not as a bpf link: the device holds the program, which stays
// after the caller exits, until Detach or until dev (or its namespace) is
// removed. Attaching to a device that has it already replaces it.
func Attach(dev string) error {
	l, err := netlink.LinkByName(dev)
	if err != nil {
		return err
	}
	prog, err := ebpf.NewProgram(&ebpf.ProgramSpec{Name: "xdp_pass", Type: ebpf.XDP, License: "GPL",
		Instructions: asm.Instructions{asm.Mov.Imm(asm.R0, verdictPass), asm.Return()}})
	if err != nil {
		return fmt.Errorf("loading an XDP program that passes every frame: %w", err)
	}
	defer prog.Close()
	if err := netlink.LinkSetXdpFdWithFlags(l, prog.FD(), nl.XDP_FLAGS_DRV_MODE); err != nil {
		return fmt.Errorf("XDP on %s: %w", dev, err)
	}
	return nil
}
