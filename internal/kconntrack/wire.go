package kconntrack

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"

	"golang.org/x/sys/unix"

	"github.com/svcproxy/svcproxy/pkg/proxy"
)

// ctnetlink attributes (linux/netfilter/nfnetlink_conntrack.h).
const (
	ctaTupleOrig  = 1
	ctaTupleReply = 2
	ctaZone       = 18

	ctaTupleIP    = 1
	ctaTupleProto = 2

	ctaIPv4Src = 1
	ctaIPv4Dst = 2
	ctaIPv6Src = 3
	ctaIPv6Dst = 4

	ctaProtoNum     = 1
	ctaProtoSrcPort = 2
	ctaProtoDstPort = 3

	nlaNested   = 0x8000
	nlaTypeMask = 0x3fff

	nlmsgHdrLen = 16
	nfgenLen    = 4
)

var native = binary.NativeEndian

func align4(n int) int { return (n + 3) &^ 3 }

// appendRequest appends a netlink header and nfgenmsg; the caller appends
// attributes and then fixes the length with finishMessage.
func appendRequest(b []byte, msg uint16, flags uint16, seq uint32, family uint8) []byte {
	start := len(b)
	b = append(b, make([]byte, nlmsgHdrLen)...)
	native.PutUint16(b[start+4:], subsysCtnetlink<<8|msg)
	native.PutUint16(b[start+6:], flags)
	native.PutUint32(b[start+8:], seq)
	b = append(b, family, 0 /* NFNETLINK_V0 */, 0, 0)
	return finishMessage(b, start)
}

func finishMessage(b []byte, start int) []byte {
	native.PutUint32(b[start:], uint32(len(b)-start))
	return b
}

// appendAttr appends one attribute with payload and padding.
func appendAttr(b []byte, typ uint16, payload []byte) []byte {
	start := len(b)
	b = append(b, 0, 0, 0, 0)
	b = append(b, payload...)
	native.PutUint16(b[start:], uint16(len(b)-start))
	native.PutUint16(b[start+2:], typ)
	for len(b)%4 != 0 {
		b = append(b, 0)
	}
	return b
}

// appendNested appends a nested attribute whose children fill adds.
func appendNested(b []byte, typ uint16, fill func([]byte) []byte) []byte {
	start := len(b)
	b = append(b, 0, 0, 0, 0)
	b = fill(b)
	native.PutUint16(b[start:], uint16(len(b)-start))
	native.PutUint16(b[start+2:], typ|nlaNested)
	return b
}

func be16(v uint16) []byte { return []byte{byte(v >> 8), byte(v)} }

// appendDelete appends an IPCTNL_MSG_CT_DELETE request for f: the kernel
// finds the entry by original tuple and zone.
func appendDelete(b []byte, f Flow, seq uint32, family uint8) []byte {
	start := len(b)
	b = appendRequest(b, msgDelete, unix.NLM_F_REQUEST|unix.NLM_F_ACK, seq, family)
	b = appendTuple(b, ctaTupleOrig, f.Orig, f.Proto, family)
	if f.Zone != 0 {
		b = appendAttr(b, ctaZone, be16(f.Zone))
	}
	return finishMessage(b, start)
}

// appendTuple appends a CTA_TUPLE_ORIG or CTA_TUPLE_REPLY attribute.
func appendTuple(b []byte, typ uint16, t Tuple, proto uint8, family uint8) []byte {
	return appendNested(b, typ, func(b []byte) []byte {
		b = appendNested(b, ctaTupleIP, func(b []byte) []byte {
			src, dst := uint16(ctaIPv4Src), uint16(ctaIPv4Dst)
			if family == unix.AF_INET6 {
				src, dst = ctaIPv6Src, ctaIPv6Dst
			}
			b = appendAttr(b, src, t.Src.Addr().AsSlice())
			return appendAttr(b, dst, t.Dst.Addr().AsSlice())
		})
		return appendNested(b, ctaTupleProto, func(b []byte) []byte {
			b = appendAttr(b, ctaProtoNum, []byte{proto})
			b = appendAttr(b, ctaProtoSrcPort, be16(t.Src.Port()))
			return appendAttr(b, ctaProtoDstPort, be16(t.Dst.Port()))
		})
	})
}

// nlMessages walks the netlink messages in buf.
func nlMessages(buf []byte, fn func(typ, flags uint16, seq uint32, body []byte) error) error {
	for len(buf) >= nlmsgHdrLen {
		l := int(native.Uint32(buf))
		if l < nlmsgHdrLen || l > len(buf) {
			return fmt.Errorf("bad netlink message length %d", l)
		}
		typ, flags, seq := native.Uint16(buf[4:]), native.Uint16(buf[6:]), native.Uint32(buf[8:])
		if err := fn(typ, flags, seq, buf[nlmsgHdrLen:l]); err != nil {
			return err
		}
		buf = buf[min(align4(l), len(buf)):]
	}
	return nil
}

// ackError returns the errno carried by an NLMSG_ERROR body (0 for an ack).
func ackError(body []byte) unix.Errno {
	if len(body) < 4 {
		return unix.EINVAL
	}
	return unix.Errno(-int32(native.Uint32(body)))
}

// errDone ends the walk of a dump.
var errDone = errors.New("done")

// parseDump visits the flows in one receive buffer of a dump. It reports
// whether the dump is complete and whether the kernel flagged it as
// interrupted.
func parseDump(buf []byte, seq uint32, family proxy.IPFamily, visit func(Flow)) (done, interrupted bool, err error) {
	err = nlMessages(buf, func(typ, flags uint16, s uint32, body []byte) error {
		if s != seq {
			return nil // a late reply to an earlier request
		}
		if flags&nlmFDumpIntr != 0 {
			interrupted = true
		}
		switch typ {
		case unix.NLMSG_DONE:
			return errDone
		case unix.NLMSG_ERROR:
			if e := ackError(body); e != 0 {
				return e
			}
			return errDone
		}
		if len(body) < nfgenLen {
			return nil
		}
		if f, ok := parseFlow(body[nfgenLen:]); ok && family.Contains(f.Orig.Dst.Addr()) {
			visit(f)
		}
		return nil
	})
	if errors.Is(err, errDone) {
		return true, interrupted, nil
	}
	return false, interrupted, err
}

// attrs walks the attributes in b.
func attrs(b []byte, fn func(typ uint16, nested bool, payload []byte)) {
	for len(b) >= 4 {
		l := int(native.Uint16(b))
		if l < 4 || l > len(b) {
			return
		}
		t := native.Uint16(b[2:])
		fn(t&nlaTypeMask, t&nlaNested != 0, b[4:l])
		b = b[min(align4(l), len(b)):]
	}
}

func parseFlow(b []byte) (f Flow, ok bool) {
	var origOK, replyOK bool
	attrs(b, func(typ uint16, _ bool, p []byte) {
		switch typ {
		case ctaTupleOrig:
			f.Orig, f.Proto, origOK = parseTuple(p)
		case ctaTupleReply:
			f.Reply, _, replyOK = parseTuple(p)
		case ctaZone:
			if len(p) >= 2 {
				f.Zone = binary.BigEndian.Uint16(p)
			}
		}
	})
	return f, origOK && replyOK
}

func parseTuple(b []byte) (t Tuple, proto uint8, ok bool) {
	var src, dst netip.Addr
	var sport, dport uint16
	attrs(b, func(typ uint16, _ bool, p []byte) {
		switch typ {
		case ctaTupleIP:
			attrs(p, func(typ uint16, _ bool, p []byte) {
				a, valid := netip.AddrFromSlice(p)
				if !valid {
					return
				}
				switch typ {
				case ctaIPv4Src, ctaIPv6Src:
					src = a
				case ctaIPv4Dst, ctaIPv6Dst:
					dst = a
				}
			})
		case ctaTupleProto:
			attrs(p, func(typ uint16, _ bool, p []byte) {
				switch {
				case typ == ctaProtoNum && len(p) >= 1:
					proto = p[0]
				case typ == ctaProtoSrcPort && len(p) >= 2:
					sport = binary.BigEndian.Uint16(p)
				case typ == ctaProtoDstPort && len(p) >= 2:
					dport = binary.BigEndian.Uint16(p)
				}
			})
		}
	})
	if !src.IsValid() || !dst.IsValid() {
		return Tuple{}, 0, false
	}
	return Tuple{Src: netip.AddrPortFrom(src, sport), Dst: netip.AddrPortFrom(dst, dport)}, proto, true
}
