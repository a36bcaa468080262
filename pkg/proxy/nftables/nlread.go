package nftables

import (
	"encoding/binary"
	"errors"
	"fmt"
	"syscall"

	"golang.org/x/sys/unix"
)

// Read-back over netlink. Listing the table through nft means `nft --json
// list table` (every rule and every element) per knftables List call, then
// decoding the JSON: 65 s for a restart at 10k services × 10 endpoints. The
// kernel dumps the same objects in binary in a fraction of that, so the
// real-kernel Proxier reads chains, rule comments, sets and elements with
// plain netlink dumps (no library: only a few attributes are needed).

// nlConn is a NETLINK_NETFILTER socket in the network namespace of the
// calling thread, used for dumps only.
type nlConn struct {
	fd  int
	seq uint32
	buf []byte
}

var errMalformed = errors.New("malformed netlink message")

// nlaTypeMask strips the nested and byte-order flags from an attribute type.
const nlaTypeMask = 0x3fff

func dialNetfilter() (*nlConn, error) {
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.NETLINK_NETFILTER)
	if err != nil {
		return nil, fmt.Errorf("netfilter netlink socket: %w", err)
	}
	if err := unix.Bind(fd, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("binding netfilter netlink socket: %w", err)
	}
	// The kernel fills one dump message of at most 32 KiB per read.
	return &nlConn{fd: fd, buf: make([]byte, 64<<10)}, nil
}

func (c *nlConn) close() { unix.Close(c.fd) }

// request sends one nf_tables request (a dump when dump is set, else a get
// with an acknowledgement) and calls each with the attributes of every
// reply message, which alias the receive buffer.
func (c *nlConn) request(msg uint16, family uint8, dump bool, attrs []byte, each func(attrs []byte) error) error {
	c.seq++
	const hdr = unix.NLMSG_HDRLEN + 4 // nlmsghdr + nfgenmsg
	req := make([]byte, hdr+len(attrs))
	flags := uint16(unix.NLM_F_REQUEST | unix.NLM_F_ACK)
	if dump {
		flags = unix.NLM_F_REQUEST | unix.NLM_F_DUMP
	}
	binary.NativeEndian.PutUint32(req[0:], uint32(len(req)))
	binary.NativeEndian.PutUint16(req[4:], uint16(unix.NFNL_SUBSYS_NFTABLES<<8)|msg)
	binary.NativeEndian.PutUint16(req[6:], flags)
	binary.NativeEndian.PutUint32(req[8:], c.seq)
	req[unix.NLMSG_HDRLEN] = family // nfgen_family; version and res_id stay 0
	copy(req[hdr:], attrs)
	if err := unix.Sendto(c.fd, req, 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return fmt.Errorf("netlink send: %w", err)
	}
	for {
		n, _, rflags, _, err := unix.Recvmsg(c.fd, c.buf, nil, 0)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return fmt.Errorf("netlink receive: %w", err)
		}
		if rflags&unix.MSG_TRUNC != 0 {
			return fmt.Errorf("netlink receive: message truncated")
		}
		done, err := c.parse(c.buf[:n], each)
		if done || err != nil {
			return err
		}
	}
}

// parse handles the messages of one read; done reports the end of the
// reply (NLMSG_DONE, or an error message, which is also the ack).
func (c *nlConn) parse(b []byte, each func([]byte) error) (done bool, err error) {
	for len(b) >= unix.NLMSG_HDRLEN {
		l := int(binary.NativeEndian.Uint32(b))
		typ := binary.NativeEndian.Uint16(b[4:])
		seq := binary.NativeEndian.Uint32(b[8:])
		if l < unix.NLMSG_HDRLEN || l > len(b) {
			return true, errMalformed
		}
		body := b[unix.NLMSG_HDRLEN:l]
		b = b[min(nlAlign(l), len(b)):]
		if seq != c.seq {
			continue // a late reply to an earlier request
		}
		switch typ {
		case unix.NLMSG_DONE:
			return true, nil
		case unix.NLMSG_ERROR:
			if len(body) < 4 {
				return true, errMalformed
			}
			if errno := int32(binary.NativeEndian.Uint32(body)); errno != 0 {
				return true, syscall.Errno(-errno)
			}
			return true, nil
		}
		if len(body) < 4 {
			return true, errMalformed
		}
		if err := each(body[4:]); err != nil {
			return true, err
		}
	}
	return false, nil
}

func nlAlign(n int) int { return (n + 3) &^ 3 }

// attrs iterates over netlink attributes.
type attrs struct {
	b   []byte
	err error
}

// next returns the next attribute's type (without the nested and byte-order
// flags) and payload.
func (a *attrs) next() (typ uint16, data []byte, ok bool) {
	if len(a.b) < 4 {
		return 0, nil, false
	}
	l := int(binary.NativeEndian.Uint16(a.b))
	if l < 4 || l > len(a.b) {
		a.err, a.b = errMalformed, nil
		return 0, nil, false
	}
	typ, data = binary.NativeEndian.Uint16(a.b[2:])&nlaTypeMask, a.b[4:l]
	a.b = a.b[min(nlAlign(l), len(a.b)):]
	return typ, data, true
}

// find returns the payload of the first attribute of type typ in b.
func find(b []byte, typ uint16) []byte {
	a := attrs{b: b}
	for t, d, ok := a.next(); ok; t, d, ok = a.next() {
		if t == typ {
			return d
		}
	}
	return nil
}

func attrString(typ uint16, s string) []byte {
	l := 4 + len(s) + 1
	b := make([]byte, nlAlign(l))
	binary.NativeEndian.PutUint16(b, uint16(l))
	binary.NativeEndian.PutUint16(b[2:], typ)
	copy(b[4:], s)
	return b
}

// cString is a NUL-terminated netlink string attribute as a Go string.
func cString(b []byte) string {
	for i, c := range b {
		if c == 0 {
			return string(b[:i])
		}
	}
	return string(b)
}

func beUint32(b []byte) uint32 {
	if len(b) < 4 {
		return 0
	}
	return binary.BigEndian.Uint32(b)
}
