package netnstest

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// Capture records the frames one interface of a namespace sends and
// receives, as tcpdump would, from an AF_PACKET socket bound to it: what a
// test checks to see which way packets went (which node a reply came
// from, by its Ethernet source), beyond what sockets tell.
type Capture struct {
	fd   int
	stop chan struct{}
	done chan struct{}

	mu     sync.Mutex
	frames []Frame
	err    error
}

// Frame is a captured frame.
type Frame struct {
	// Outgoing: the interface sent it; otherwise it received it.
	Outgoing bool
	// Data is the whole frame, Ethernet header first.
	Data []byte
}

// captureSnap is the most of a frame Capture keeps: the headers a test
// reads, and more (a GRO-merged frame may be far longer).
const captureSnap = 256

// capturePoll is how long a read waits for a frame before it looks
// whether Close was called.
const capturePoll = 50 * time.Millisecond

// Capture starts recording the frames iface sends and receives in ns,
// until Close (the Lab closes it too).
func (ns *NS) Capture(iface string) (*Capture, error) {
	c := &Capture{fd: -1, stop: make(chan struct{}), done: make(chan struct{})}
	err := ns.Do(func() error {
		dev, err := net.InterfaceByName(iface)
		if err != nil {
			return err
		}
		// A socket belongs to the namespace it was made in, whichever
		// thread reads it later.
		fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, int(htons(unix.ETH_P_ALL)))
		if err != nil {
			return err
		}
		c.fd = fd
		tv := unix.NsecToTimeval(capturePoll.Nanoseconds())
		if err := unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv); err != nil {
			return err
		}
		return unix.Bind(fd, &unix.SockaddrLinklayer{Protocol: htons(unix.ETH_P_ALL), Ifindex: dev.Index})
	})
	if err != nil {
		if c.fd >= 0 {
			unix.Close(c.fd)
		}
		return nil, fmt.Errorf("capturing on %s in %s: %w", iface, ns.Name, err)
	}
	go c.read()
	ns.lab.OnClose(func() { _ = c.Close() })
	return c, nil
}

func (c *Capture) read() {
	defer close(c.done)
	buf := make([]byte, 1<<16)
	for {
		n, from, err := unix.Recvfrom(c.fd, buf, unix.MSG_TRUNC)
		if errors.Is(err, unix.EAGAIN) || errors.Is(err, unix.EINTR) {
			// Nothing queued: once Close was called, every frame
			// before it has been read.
			select {
			case <-c.stop:
				return
			default:
				continue
			}
		}
		if err != nil {
			c.mu.Lock()
			c.err = err
			c.mu.Unlock()
			return
		}
		ll, _ := from.(*unix.SockaddrLinklayer)
		f := Frame{Outgoing: ll != nil && ll.Pkttype == unix.PACKET_OUTGOING, Data: append([]byte(nil), buf[:min(n, captureSnap)]...)}
		c.mu.Lock()
		c.frames = append(c.frames, f)
		c.mu.Unlock()
	}
}

// Frames returns the frames recorded so far, and the error that stopped
// the recording, if one did.
func (c *Capture) Frames() ([]Frame, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]Frame(nil), c.frames...), c.err
}

// Close stops recording and releases the socket; the frames stay.
func (c *Capture) Close() error {
	select {
	case <-c.stop:
		return nil
	default:
	}
	close(c.stop)
	<-c.done
	return unix.Close(c.fd)
}

// Source and Destination are the frame's Ethernet addresses.
func (f Frame) Source() net.HardwareAddr      { return f.mac(6) }
func (f Frame) Destination() net.HardwareAddr { return f.mac(0) }

func (f Frame) mac(at int) net.HardwareAddr {
	if len(f.Data) < at+6 {
		return nil
	}
	return net.HardwareAddr(f.Data[at : at+6])
}

// Flow is the IP protocol, source and destination of a TCP or UDP frame,
// IPv4 (without options) or IPv6 (without extension headers); ok is false
// for any other frame.
func (f Frame) Flow() (proto uint8, src, dst netip.AddrPort, ok bool) {
	if len(f.Data) < 14 {
		return 0, src, dst, false
	}
	ip := f.Data[14:]
	var (
		sa, da netip.Addr
		l4     []byte
	)
	switch binary.BigEndian.Uint16(f.Data[12:14]) {
	case unix.ETH_P_IP:
		if len(ip) < 24 || ip[0] != 0x45 {
			return 0, src, dst, false
		}
		proto, sa, da, l4 = ip[9], netip.AddrFrom4([4]byte(ip[12:16])), netip.AddrFrom4([4]byte(ip[16:20])), ip[20:]
	case unix.ETH_P_IPV6:
		if len(ip) < 44 {
			return 0, src, dst, false
		}
		proto, sa, da, l4 = ip[6], netip.AddrFrom16([16]byte(ip[8:24])), netip.AddrFrom16([16]byte(ip[24:40])), ip[40:]
	default:
		return 0, src, dst, false
	}
	if proto != unix.IPPROTO_TCP && proto != unix.IPPROTO_UDP {
		return 0, src, dst, false
	}
	return proto, netip.AddrPortFrom(sa, binary.BigEndian.Uint16(l4[0:2])),
		netip.AddrPortFrom(da, binary.BigEndian.Uint16(l4[2:4])), true
}

// HardwareAddr is iface's Ethernet address in ns.
func (ns *NS) HardwareAddr(iface string) (net.HardwareAddr, error) {
	var mac net.HardwareAddr
	err := ns.Do(func() error {
		dev, err := net.InterfaceByName(iface)
		if err == nil {
			mac = dev.HardwareAddr
		}
		return err
	})
	return mac, err
}

// htons is v in network byte order, as AF_PACKET takes protocols.
func htons(v uint16) uint16 { return v<<8 | v>>8 }
