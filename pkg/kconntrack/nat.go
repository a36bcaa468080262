package kconntrack

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"time"

	"golang.org/x/sys/unix"

	"github.com/svcproxy/svcproxy/pkg/knetlink"
	"github.com/svcproxy/svcproxy/pkg/proxy"
)

// ctnetlink attributes of a translated flow (nfnetlink_conntrack.h).
const (
	ctaProtoinfo = 4
	ctaNATSrc    = 6
	ctaNATDst    = 13

	ctaNATV4MinIP = 1
	ctaNATV4MaxIP = 2
	ctaNATProto   = 3
	ctaNATV6MinIP = 4
	ctaNATV6MaxIP = 5

	ctaProtoNATPortMin = 1
	ctaProtoNATPortMax = 2

	ctaProtoinfoTCP           = 1
	ctaProtoinfoTCPState      = 1
	ctaProtoinfoTCPFlagsOrig  = 4
	ctaProtoinfoTCPFlagsReply = 5

	// tcpConntrackEstablished is TCP_CONNTRACK_ESTABLISHED.
	tcpConntrackEstablished = 3
	// tcpFlagBeLiberal is IP_CT_TCP_FLAG_BE_LIBERAL: the entry accepts
	// any sequence number. A flow handed over mid-stream comes without the
	// window scale its handshake agreed: the kernel would judge later
	// segments by windows it takes as unscaled, and one it found out of
	// window would be invalid, so untranslated.
	tcpFlagBeLiberal = 0x08
)

// NATFlow is a connection someone else translated so far, to be created
// in the kernel's table with its translation, so that netfilter's NAT
// carries it on: what the client sends (Orig) is sent to DNAT, from SNAT
// when that is valid (a masqueraded flow), and the answers go back to
// the client from Orig.Dst. A TCP flow is created established. Netfilter
// applies the translation only in a family that has a nat hook (a nat
// chain of any table) and whose packets it tracks (a rule needs
// conntrack): elsewhere the flow passes untranslated.
type NATFlow struct {
	Proto      uint8
	Orig       Tuple
	DNAT, SNAT netip.AddrPort
	// Timeout is how long the entry lives without a packet; the flow's
	// next packet sets the kernel's own timeout for its state.
	Timeout time.Duration
	// Replaces, when valid, is the original tuple of an entry of the
	// kernel's (zone 0) deleted right before the flow is created, in the
	// same batch: the flow tracked untranslated so far, whose reply tuple
	// the translated flow takes. A packet between the two would track it
	// again, and the kernel refuse the flow.
	Replaces Tuple
}

// Reply is the reply tuple the kernel gives the flow: the endpoint
// answering the client, or the masquerade address.
func (f NATFlow) Reply() Tuple {
	dst := f.Orig.Src
	if f.SNAT.IsValid() {
		dst = f.SNAT
	}
	return Tuple{Src: f.DNAT, Dst: dst}
}

// Flow is f as List reads it back once created.
func (f NATFlow) Flow() Flow {
	return Flow{Proto: f.Proto, Orig: f.Orig, Reply: f.Reply(), Replied: true}
}

// Refused is a flow the kernel did not create, and why: EEXIST when
// either of its tuples belongs to another entry (a clash).
type Refused struct {
	Flow NATFlow
	Err  unix.Errno
}

// CreateNAT creates flows translated, in batches like Delete, each after
// the deletion of the entry it replaces, and returns those the kernel
// refused; an error is about the exchange itself. The kernel refuses a
// flow whose tuples an entry holds (EEXIST: a clash).
func (c *Client) CreateNAT(ctx context.Context, family proxy.IPFamily, flows []NATFlow) ([]Refused, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.fd < 0 {
		return nil, errors.New("conntrack client closed")
	}
	var refused []Refused
	var msg []byte
	for len(flows) > 0 {
		if err := ctx.Err(); err != nil {
			return refused, err
		}
		// Up to two requests a flow: their acks fit the buffer.
		batch := flows[:min(max(c.batchSize()/2, 1), len(flows))]
		flows = flows[len(batch):]
		msg = msg[:0]
		first := c.seq + 1
		// creates[r] is the flow of request r when it is a creation, -1
		// for a deletion, whose answer (ENOENT: none tracked) only
		// matters through the creation's.
		creates := make([]int, 0, 2*len(batch))
		for i, f := range batch {
			if f.Replaces.Src.IsValid() {
				c.seq++
				msg = appendDelete(msg, Flow{Proto: f.Proto, Orig: f.Replaces}, c.seq, inetFamily(family))
				creates = append(creates, -1)
			}
			c.seq++
			msg = appendCreateNAT(msg, f, c.seq, inetFamily(family))
			creates = append(creates, i)
		}
		err := c.exchangeEach(msg, first, len(creates), func(r int, e unix.Errno) {
			if i := creates[r]; i >= 0 && e != 0 {
				refused = append(refused, Refused{Flow: batch[i], Err: e})
			}
		})
		if err != nil {
			c.resetLocked()
			return refused, fmt.Errorf("conntrack create: %w", err)
		}
	}
	return refused, nil
}

// appendCreateNAT appends an IPCTNL_MSG_CT_NEW request for f. Its reply
// tuple is the original one reversed, untranslated: the kernel's NAT
// setup derives the translated reply tuple from it, and marks the entry
// translated (IPS_DST_NAT, IPS_SRC_NAT) only where its result differs, so
// a reply tuple given translated already would leave the entry
// untranslated. The source range is given even for a flow that keeps
// the client's: without one, the kernel's null binding may pick another
// source port where the reply tuple is taken (by the kernel's own entry
// of the flow), and the connection would reach its endpoint from a port
// it never saw; a single address and port makes it refuse the flow.
func appendCreateNAT(b []byte, f NATFlow, seq uint32, family uint8) []byte {
	start := len(b)
	b = appendRequest(b, msgNew, unix.NLM_F_REQUEST|unix.NLM_F_ACK|unix.NLM_F_CREATE|unix.NLM_F_EXCL, seq, family)
	b = appendTuple(b, ctaTupleOrig, f.Orig, f.Proto, family)
	b = appendTuple(b, ctaTupleReply, Tuple{Src: f.Orig.Dst, Dst: f.Orig.Src}, f.Proto, family)
	b = appendNATRange(b, ctaNATDst, f.DNAT, family)
	b = appendNATRange(b, ctaNATSrc, f.Reply().Dst, family)
	b = knetlink.AppendAttr(b, ctaTimeout, be32(uint32(f.Timeout/time.Second)))
	b = knetlink.AppendAttr(b, ctaStatus, be32(createdStatus))
	if f.Proto == ProtoTCP {
		b = appendEstablished(b)
	}
	knetlink.SetLen(b, start)
	return b
}

// appendNATRange appends a CTA_NAT_DST or CTA_NAT_SRC attribute whose
// range is the single address and port to.
func appendNATRange(b []byte, typ uint16, to netip.AddrPort, family uint8) []byte {
	return appendNested(b, typ, func(b []byte) []byte {
		minIP, maxIP := uint16(ctaNATV4MinIP), uint16(ctaNATV4MaxIP)
		if family == unix.AF_INET6 {
			minIP, maxIP = ctaNATV6MinIP, ctaNATV6MaxIP
		}
		b = knetlink.AppendAttr(b, minIP, to.Addr().AsSlice())
		b = knetlink.AppendAttr(b, maxIP, to.Addr().AsSlice())
		return appendNested(b, ctaNATProto, func(b []byte) []byte {
			b = knetlink.AppendAttr(b, ctaProtoNATPortMin, be16(to.Port()))
			return knetlink.AppendAttr(b, ctaProtoNATPortMax, be16(to.Port()))
		})
	})
}

// appendEstablished appends CTA_PROTOINFO for an established TCP
// connection whose window tracking is liberal both ways
// (tcpFlagBeLiberal).
func appendEstablished(b []byte) []byte {
	return appendNested(b, ctaProtoinfo, func(b []byte) []byte {
		return appendNested(b, ctaProtoinfoTCP, func(b []byte) []byte {
			b = knetlink.AppendAttr(b, ctaProtoinfoTCPState, []byte{tcpConntrackEstablished})
			liberal := []byte{tcpFlagBeLiberal, tcpFlagBeLiberal} // struct nf_ct_tcp_flags: flags, mask
			b = knetlink.AppendAttr(b, ctaProtoinfoTCPFlagsOrig, liberal)
			return knetlink.AppendAttr(b, ctaProtoinfoTCPFlagsReply, liberal)
		})
	})
}
