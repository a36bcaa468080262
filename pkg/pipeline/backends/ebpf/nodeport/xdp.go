package nodeport

import (
	"fmt"
	"net"

	"github.com/cilium/ebpf/link"
	"github.com/vishvananda/netlink"

	"github.com/svcproxy/svcproxy/pkg/pipeline/backends/ebpf/bpfmap"
)

// Acceleration is whether np_xdp runs in front of the tc programs, as
// Cilium's acceleration setting: on no interface, on every one (a driver
// without native XDP fails the sync), or where the driver allows (the
// others tc alone serves).
type Acceleration string

const (
	AccelerationDisabled   Acceleration = "disabled"
	AccelerationNative     Acceleration = "native"
	AccelerationBestEffort Acceleration = "best-effort"
)

// ParseAcceleration parses --bpf-acceleration; "" is disabled.
func ParseAcceleration(s string) (Acceleration, error) {
	switch a := Acceleration(s); a {
	case "":
		return AccelerationDisabled, nil
	case AccelerationDisabled, AccelerationNative, AccelerationBestEffort:
		return a, nil
	}
	return "", fmt.Errorf("%q is not disabled, native or best-effort", s)
}

const (
	progXDP   = "np_xdp"
	mapXDPOut = "np_xdp_out"
)

// attachXDP attaches np_xdp to dev in native (driver) mode, through the
// link pinned in dir when there is one, and lets it send out of dev. A
// driver without native XDP fails native acceleration; best-effort leaves
// dev to tc. Generic (skb) XDP is never used: it would run after the skb
// exists, where tc is as fast.
func (l *loaded) attachXDP(dir string, dev *net.Interface, accel Acceleration) error {
	if accel != AccelerationNative && accel != AccelerationBestEffort {
		return nil
	}
	prog := l.coll.Programs[progXDP]
	lk, err := bpfmap.AttachPinned(linkPin(dir, progXDP, dev.Name), prog, func() (link.Link, error) {
		return link.AttachXDP(link.XDPOptions{Program: prog, Interface: dev.Index, Flags: link.XDPDriverMode})
	})
	if err != nil {
		if accel == AccelerationNative {
			return fmt.Errorf("native XDP on %s (--bpf-acceleration=native): %w", dev.Name, err)
		}
		return nil
	}
	l.xdp = append(l.xdp, lk)
	l.xdpIfaces = append(l.xdpIfaces, dev.Name)
	idx := uint32(dev.Index)
	return l.coll.Maps[mapXDPOut].Put(idx, idx)
}

// closeXDP releases the XDP links' descriptors (their pins keep them
// attached). A reload must do so first: a device takes one XDP link, and
// the new one would be refused while the old one is held.
func (l *loaded) closeXDP() {
	for _, lk := range l.xdp {
		lk.Close()
	}
	l.xdp = nil
}

// Accelerated lists the interfaces np_xdp runs on, after a Sync.
func (p *Proxier) Accelerated() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.accelerated()
}

func (p *Proxier) accelerated() []string {
	if p.kernel == nil {
		return nil
	}
	return append([]string(nil), p.kernel.xdpIfaces...)
}

// Veths lists which of ifaces (in the calling thread's network namespace)
// are veths. On a veth XDP depends on the peer: a sender on this machine
// that leaves its checksums to offload gets its packets handed to tc
// (l4_csum_partial in the C), and the peer takes the frames XDP sends back
// out (XDP_TX) only when it runs an XDP program of its own.
func Veths(ifaces []string) []string {
	var out []string
	for _, name := range ifaces {
		if l, err := netlink.LinkByName(name); err == nil && l.Type() == "veth" {
			out = append(out, name)
		}
	}
	return out
}
