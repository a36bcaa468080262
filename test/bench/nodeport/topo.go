package main

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"runtime"
	"unsafe"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/svcproxy/svcproxy/pkg/testing/netnstest"
)

// The topology: gen ─ gen0 … ext0 ─ node ─ int0 … ep0 ─ ep. The node's
// addresses and the endpoints' are in the test ranges, and no namespace
// has a default route: nothing leaves the three namespaces.
var (
	genIP     = netip.MustParseAddr("198.19.254.2")
	nodeIP    = netip.MustParseAddr("198.19.254.1")
	nodeIntIP = netip.MustParseAddr("198.19.253.254")
	// endpoints are the target Services' endpoints, all on ep0.
	endpoints = func() []netip.Addr {
		var out []netip.Addr
		for i := 1; i <= 10; i++ {
			out = append(out, netip.AddrFrom4([4]byte{198, 19, 253, byte(i)}))
		}
		return out
	}()
)

const (
	genIf, extIf = "gen0", "ext0"
	intIf, epIf  = "int0", "ep0"
)

// topo is one measurement's namespaces, with the endpoint's counter
// attached and the sender loaded.
type topo struct {
	lab           *netnstest.Lab
	gen, node, ep *netnstest.NS
	counts        *ebpf.Map
	counter       link.Link
	sender        *ebpf.Program
	frame         []byte
	genIndex      int
	undo          func()
}

func newTopo(targets int, flows uint16) (t *topo, err error) {
	lab, err := netnstest.NewLab()
	if err != nil {
		return nil, err
	}
	t = &topo{lab: lab}
	t.undo = onExit(t.release)
	defer func() {
		if err != nil {
			t.close()
		}
	}()
	for _, p := range []struct {
		ns   **netnstest.NS
		role string
	}{{&t.gen, "gen"}, {&t.node, "node"}, {&t.ep, "ep"}} {
		if *p.ns, err = lab.NewNS(p.role); err != nil {
			return nil, err
		}
	}
	if err := t.wire(); err != nil {
		return nil, err
	}
	if err := t.attachCounter(); err != nil {
		return nil, err
	}
	if err := t.prepareConns(); err != nil {
		return nil, err
	}
	return t, t.loadSender(targets, flows)
}

// wire creates the links, addresses and the node's neighbours. The
// endpoints' neighbour entries are static: the counter drops the frames
// of the packet measurement before the endpoint's stack.
func (t *topo) wire() error {
	if err := netnstest.Veth(t.gen, genIf, t.node, extIf); err != nil {
		return err
	}
	if err := netnstest.Veth(t.node, intIf, t.ep, epIf); err != nil {
		return err
	}
	for _, a := range []struct {
		ns   *netnstest.NS
		dev  string
		addr netip.Addr
	}{{t.gen, genIf, genIP}, {t.node, extIf, nodeIP}, {t.node, intIf, nodeIntIP}, {t.ep, epIf, endpoints[0]}} {
		if err := a.ns.AddAddr(a.dev, netip.PrefixFrom(a.addr, 24)); err != nil {
			return err
		}
	}
	if err := t.node.EnableForwarding(); err != nil {
		return err
	}
	epMAC, err := macOf(t.ep, epIf)
	if err != nil {
		return err
	}
	for _, ip := range endpoints {
		if _, err := t.node.Run(context.Background(), "ip", "neigh", "replace", ip.String(), "lladdr", epMAC.String(), "dev", intIf, "nud", "permanent"); err != nil {
			return err
		}
	}
	// The sender's frames arrive as XDP frames, which a veth takes only
	// in NAPI mode: an XDP program attached, or GRO on (enough for frames
	// BPF_PROG_RUN sends, which it redirects: a redirect wakes the peer).
	return t.node.Do(func() error { return setGRO(extIf, true) })
}

func (t *topo) attachCounter() error {
	var err error
	if t.counts, err = newCounts(); err != nil {
		return err
	}
	prog, err := ebpf.NewProgram(counterSpec(t.counts))
	if err != nil {
		return fmt.Errorf("load the counter: %w", err)
	}
	defer prog.Close()
	return t.ep.Do(func() error {
		idx, err := ifindex(epIf)
		if err != nil {
			return err
		}
		t.counter, err = link.AttachXDP(link.XDPOptions{Program: prog, Interface: idx, Flags: link.XDPDriverMode})
		return err
	})
}

func (t *topo) loadSender(targets int, flows uint16) error {
	genMAC, err := macOf(t.gen, genIf)
	if err != nil {
		return err
	}
	extMAC, err := macOf(t.node, extIf)
	if err != nil {
		return err
	}
	t.frame = udpFrame(genMAC, extMAC, genIP, nodeIP)
	if t.sender, err = ebpf.NewProgram(senderSpec(t.frame, 20000, flows, firstNodePort, uint16(targets))); err != nil {
		return fmt.Errorf("load the sender: %w", err)
	}
	return t.gen.Do(func() error {
		t.genIndex, err = ifindex(genIf)
		return err
	})
}

// send transmits frames from gen0 until stop is closed, in the gen
// namespace (BPF_PROG_RUN resolves the interface there).
func (t *topo) send(stop <-chan struct{}) error {
	return t.gen.Do(func() error {
		for {
			select {
			case <-stop:
				return nil
			default:
			}
			_, err := t.sender.Run(&ebpf.RunOptions{
				Data:    t.frame,
				Context: xdpMD{DataEnd: uint32(len(t.frame)), IngressIfindex: uint32(t.genIndex)},
				Repeat:  1 << 16,
				Flags:   liveFrames,
			})
			if err != nil {
				return fmt.Errorf("send: %w", err)
			}
		}
	})
}

// close removes the topology (once, also on a signal: onExit).
func (t *topo) close() { t.undo() }

func (t *topo) release() {
	if t.counter != nil {
		_ = t.counter.Close()
	}
	if t.sender != nil {
		_ = t.sender.Close()
	}
	if t.counts != nil {
		_ = t.counts.Close()
	}
	_ = t.lab.Close()
}

func macOf(ns *netnstest.NS, dev string) (net.HardwareAddr, error) {
	var mac net.HardwareAddr
	err := ns.Do(func() error {
		l, err := netlink.LinkByName(dev)
		if err != nil {
			return err
		}
		mac = l.Attrs().HardwareAddr
		return nil
	})
	return mac, err
}

func ifindex(dev string) (int, error) {
	l, err := netlink.LinkByName(dev)
	if err != nil {
		return 0, fmt.Errorf("find %s: %w", dev, err)
	}
	return l.Attrs().Index, nil
}

// setGRO turns GRO on or off on dev (in the calling thread's namespace).
func setGRO(dev string, on bool) error { return setFeature(dev, "GRO", ethtoolSGRO, on) }

// setTXChecksum turns checksum offload of sent packets on or off on dev.
func setTXChecksum(dev string, on bool) error {
	return setFeature(dev, "TX checksumming", ethtoolSTXCSUM, on)
}

// The ethtool ioctl's commands.
const (
	ethtoolSTXCSUM = 0x17
	ethtoolSGRO    = 0x2c
)

// setFeature sets one of dev's features with the ethtool ioctl; no
// ethtool binary is needed.
func setFeature(dev, what string, cmd uint32, on bool) error {
	val := struct{ cmd, data uint32 }{cmd: cmd}
	if on {
		val.data = 1
	}
	var ifr struct {
		name [unix.IFNAMSIZ]byte
		data unsafe.Pointer
		_    [16]byte
	}
	copy(ifr.name[:], dev)
	ifr.data = unsafe.Pointer(&val)
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	_, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), unix.SIOCETHTOOL, uintptr(unsafe.Pointer(&ifr)))
	runtime.KeepAlive(&val)
	if errno != 0 {
		return fmt.Errorf("%s on %s: %w", what, dev, errno)
	}
	return nil
}
