// Package knetlink is the netlink framing shared by the project's netfilter
// clients (pkg/knft, pkg/kconntrack): the NETLINK_NETFILTER socket,
// message headers with their nfgenmsg, attributes appended in place, and
// walks over received messages and attributes without copying. See
// README.md for why this is not vishvananda/netlink's nl package.
package knetlink

import (
	"encoding/binary"
	"errors"
	"fmt"
	"syscall"

	"golang.org/x/sys/unix"
)

// HdrLen is a netlink header plus an nfgenmsg: where a netfilter message's
// attributes begin.
const HdrLen = unix.NLMSG_HDRLEN + 4

// nlaFNested marks a nested attribute; nf_tables does not insist on it,
// but libnftnl sets it and so do we.
const nlaFNested = 0x8000

// nlaTypeMask strips the nested and byte-order flags from an attribute type.
const nlaTypeMask = 0x3fff

// ErrMalformed is a message or attribute whose length does not fit.
var ErrMalformed = errors.New("malformed netlink message")

var native = binary.NativeEndian

// OpenNetfilter opens and binds a NETLINK_NETFILTER socket in the network
// namespace of the calling thread.
func OpenNetfilter() (int, error) {
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.NETLINK_NETFILTER)
	if err != nil {
		return -1, fmt.Errorf("netfilter netlink socket: %w", err)
	}
	if err := unix.Bind(fd, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		unix.Close(fd)
		return -1, fmt.Errorf("binding netfilter netlink socket: %w", err)
	}
	return fd, nil
}

// Send writes one buffer of messages to the kernel.
func Send(fd int, b []byte) error {
	return unix.Sendto(fd, b, 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK})
}

// Receive reads one datagram into buf, retrying on EINTR; a datagram
// larger than buf is an error.
func Receive(fd int, buf []byte) (int, error) {
	for {
		n, _, rflags, _, err := unix.Recvmsg(fd, buf, nil, 0)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return 0, err
		}
		if rflags&unix.MSG_TRUNC != 0 {
			return 0, errors.New("netlink message truncated")
		}
		return n, nil
	}
}

// Drain reads and discards, into buf, every datagram queued on the socket,
// without waiting for more.
func Drain(fd int, buf []byte) error {
	for {
		_, _, _, _, err := unix.Recvmsg(fd, buf, nil, unix.MSG_DONTWAIT)
		switch {
		case errors.Is(err, unix.EAGAIN):
			return nil
		case errors.Is(err, unix.EINTR):
		case err != nil:
			return err
		}
	}
}

// AppendHeader appends a netlink header and an nfgenmsg (version 0,
// res_id in network order); SetLen fills in the length once the message is
// complete.
func AppendHeader(b []byte, typ, flags uint16, seq uint32, family uint8, resID uint16) []byte {
	b = native.AppendUint32(b, 0)
	b = native.AppendUint16(b, typ)
	b = native.AppendUint16(b, flags)
	b = native.AppendUint32(b, seq)
	b = native.AppendUint32(b, 0) // port id: the kernel's
	b = append(b, family, unix.NFNETLINK_V0)
	return binary.BigEndian.AppendUint16(b, resID)
}

// SetLen sets the length of the message that starts at b[start:] to the
// end of b.
func SetLen(b []byte, start int) { native.PutUint32(b[start:], uint32(len(b)-start)) }

// AddFlags ors flags into the header of the message at b[start:].
func AddFlags(b []byte, start int, flags uint16) {
	native.PutUint16(b[start+6:], native.Uint16(b[start+6:])|flags)
}

// Align rounds n up to netlink's 4-byte alignment.
func Align(n int) int { return (n + 3) &^ 3 }

// AppendAttr appends an attribute with payload data, padded to 4 bytes.
func AppendAttr(b []byte, typ uint16, data []byte) []byte {
	b = native.AppendUint16(b, uint16(4+len(data)))
	b = native.AppendUint16(b, typ)
	b = append(b, data...)
	var pad [3]byte
	return append(b, pad[:Align(len(data))-len(data)]...)
}

// AppendString appends a NUL-terminated string attribute.
func AppendString(b []byte, typ uint16, s string) []byte {
	start := len(b)
	b = native.AppendUint16(b, uint16(4+len(s)+1))
	b = native.AppendUint16(b, typ)
	b = append(b, s...)
	b = append(b, 0)
	var pad [3]byte
	return append(b, pad[:Align(len(b)-start)-(len(b)-start)]...)
}

// NestStart appends the header of a nested attribute whose length NestEnd
// fills in once its contents are appended.
func NestStart(b []byte, typ uint16) []byte {
	b = native.AppendUint16(b, 0)
	return native.AppendUint16(b, typ|nlaFNested)
}

// NestEnd sets the length of the nested attribute that starts at b[at:].
func NestEnd(b []byte, at int) { native.PutUint16(b[at:], uint16(len(b)-at)) }

// Messages walks the netlink messages in buf, calling fn with each one's
// type, flags, sequence number and body (after the netlink header); an
// error from fn stops the walk and is returned.
func Messages(buf []byte, fn func(typ, flags uint16, seq uint32, body []byte) error) error {
	for len(buf) >= unix.NLMSG_HDRLEN {
		l := int(native.Uint32(buf))
		if l < unix.NLMSG_HDRLEN || l > len(buf) {
			return ErrMalformed
		}
		typ, flags, seq := native.Uint16(buf[4:]), native.Uint16(buf[6:]), native.Uint32(buf[8:])
		if err := fn(typ, flags, seq, buf[unix.NLMSG_HDRLEN:l]); err != nil {
			return err
		}
		buf = buf[min(Align(l), len(buf)):]
	}
	return nil
}

// AckErrno returns the errno an NLMSG_ERROR body carries (0: an ack).
func AckErrno(body []byte) syscall.Errno {
	if len(body) < 4 {
		return unix.EINVAL
	}
	return syscall.Errno(-int32(native.Uint32(body)))
}

// ErrEnd is what ReplyEnd returns for the end of a reply: NLMSG_DONE, or
// an ack. A walk of Messages stops on it.
var ErrEnd = errors.New("end of netlink reply")

// ReplyEnd tells whether a message ends a reply to a request: ErrEnd
// (NLMSG_DONE, or an ack), the errno of an NLMSG_ERROR, or nil for any
// other message.
func ReplyEnd(typ uint16, body []byte) error {
	switch typ {
	case unix.NLMSG_DONE:
		return ErrEnd
	case unix.NLMSG_ERROR:
		if errno := AckErrno(body); errno != 0 {
			return errno
		}
		return ErrEnd
	}
	return nil
}

// Attrs iterates over netlink attributes.
type Attrs struct {
	B   []byte
	Err error // ErrMalformed once an attribute did not fit
}

// Next returns the next attribute's type (without the nested and
// byte-order flags) and payload.
func (a *Attrs) Next() (typ uint16, data []byte, ok bool) {
	if len(a.B) < 4 {
		return 0, nil, false
	}
	l := int(native.Uint16(a.B))
	if l < 4 || l > len(a.B) {
		a.Err, a.B = ErrMalformed, nil
		return 0, nil, false
	}
	typ, data = native.Uint16(a.B[2:])&nlaTypeMask, a.B[4:l]
	a.B = a.B[min(Align(l), len(a.B)):]
	return typ, data, true
}

// Find returns the payload of the first attribute of type typ in b.
func Find(b []byte, typ uint16) []byte {
	a := Attrs{B: b}
	for t, d, ok := a.Next(); ok; t, d, ok = a.Next() {
		if t == typ {
			return d
		}
	}
	return nil
}

// CString is a NUL-terminated string attribute as a Go string.
func CString(b []byte) string {
	for i, c := range b {
		if c == 0 {
			return string(b[:i])
		}
	}
	return string(b)
}
