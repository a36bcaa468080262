package kconntrack

import (
	"encoding/binary"
	"errors"
	"net/netip"

	"golang.org/x/sys/unix"

	"github.com/svcproxy/svcproxy/pkg/knetlink"
	"github.com/svcproxy/svcproxy/pkg/proxy"
)

// ctnetlink attributes (linux/netfilter/nfnetlink_conntrack.h).
const (
	ctaTupleOrig  = 1
	ctaTupleReply = 2
	ctaStatus     = 3
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

	// statusSeenReply is IPS_SEEN_REPLY in CTA_STATUS.
	statusSeenReply = 1 << 1
)

// appendRequest appends a ctnetlink request's header, its length set; a
// caller that appends attributes sets it again with knetlink.SetLen.
func appendRequest(b []byte, msg uint16, flags uint16, seq uint32, family uint8) []byte {
	start := len(b)
	b = knetlink.AppendHeader(b, subsysCtnetlink<<8|msg, flags, seq, family, 0)
	knetlink.SetLen(b, start)
	return b
}

// appendNested appends a nested attribute whose children fill adds.
func appendNested(b []byte, typ uint16, fill func([]byte) []byte) []byte {
	start := len(b)
	b = fill(knetlink.NestStart(b, typ))
	knetlink.NestEnd(b, start)
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
		b = knetlink.AppendAttr(b, ctaZone, be16(f.Zone))
	}
	knetlink.SetLen(b, start)
	return b
}

// appendTuple appends a CTA_TUPLE_ORIG or CTA_TUPLE_REPLY attribute.
func appendTuple(b []byte, typ uint16, t Tuple, proto uint8, family uint8) []byte {
	return appendNested(b, typ, func(b []byte) []byte {
		b = appendNested(b, ctaTupleIP, func(b []byte) []byte {
			src, dst := uint16(ctaIPv4Src), uint16(ctaIPv4Dst)
			if family == unix.AF_INET6 {
				src, dst = ctaIPv6Src, ctaIPv6Dst
			}
			b = knetlink.AppendAttr(b, src, t.Src.Addr().AsSlice())
			return knetlink.AppendAttr(b, dst, t.Dst.Addr().AsSlice())
		})
		return appendNested(b, ctaTupleProto, func(b []byte) []byte {
			b = knetlink.AppendAttr(b, ctaProtoNum, []byte{proto})
			b = knetlink.AppendAttr(b, ctaProtoSrcPort, be16(t.Src.Port()))
			return knetlink.AppendAttr(b, ctaProtoDstPort, be16(t.Dst.Port()))
		})
	})
}

// parseDump visits the flows in one receive buffer of a dump. It reports
// whether the dump is complete and whether the kernel flagged it as
// interrupted.
func parseDump(buf []byte, seq uint32, family proxy.IPFamily, visit func(Flow)) (done, interrupted bool, err error) {
	err = knetlink.Messages(buf, func(typ, flags uint16, s uint32, body []byte) error {
		if s != seq {
			return nil // a late reply to an earlier request
		}
		if flags&nlmFDumpIntr != 0 {
			interrupted = true
		}
		if err := knetlink.ReplyEnd(typ, body); err != nil {
			return err
		}
		if len(body) < knetlink.HdrLen-unix.NLMSG_HDRLEN {
			return nil
		}
		if f, ok := parseFlow(body[knetlink.HdrLen-unix.NLMSG_HDRLEN:]); ok && family.Contains(f.Orig.Dst.Addr()) {
			visit(f)
		}
		return nil
	})
	if errors.Is(err, knetlink.ErrEnd) {
		return true, interrupted, nil
	}
	return false, interrupted, err
}

// attrs walks the attributes in b.
func attrs(b []byte, fn func(typ uint16, payload []byte)) {
	a := knetlink.Attrs{B: b}
	for t, p, ok := a.Next(); ok; t, p, ok = a.Next() {
		fn(t, p)
	}
}

func parseFlow(b []byte) (f Flow, ok bool) {
	var origOK, replyOK bool
	attrs(b, func(typ uint16, p []byte) {
		switch typ {
		case ctaTupleOrig:
			f.Orig, f.Proto, origOK = parseTuple(p)
		case ctaTupleReply:
			f.Reply, _, replyOK = parseTuple(p)
		case ctaZone:
			if len(p) >= 2 {
				f.Zone = binary.BigEndian.Uint16(p)
			}
		case ctaStatus:
			if len(p) >= 4 {
				f.Replied = binary.BigEndian.Uint32(p)&statusSeenReply != 0
			}
		}
	})
	return f, origOK && replyOK
}

func parseTuple(b []byte) (t Tuple, proto uint8, ok bool) {
	var src, dst netip.Addr
	var sport, dport uint16
	attrs(b, func(typ uint16, p []byte) {
		switch typ {
		case ctaTupleIP:
			attrs(p, func(typ uint16, p []byte) {
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
			attrs(p, func(typ uint16, p []byte) {
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
