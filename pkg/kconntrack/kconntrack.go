// Package kconntrack is a thin client for the kernel's connection tracking
// table over netlink (ctnetlink): stream the flows of one IP family,
// delete a set of flows in batches, and create flows with their NAT
// (CreateNAT: ebpf mode's tc programs hand the connections they
// translated to the kernel when they leave a node). It holds no policy;
// internal/conntrack decides which flows are stale. Fake is an in-memory
// table for unit tests.
//
// It speaks the protocol itself, on pkg/knetlink, rather than through
// vishvananda/netlink's conntrack calls: those read a whole dump into
// memory and send one request per flow, where the reconciler lists and
// deletes tables of hundreds of thousands of flows in bounded memory and
// batches, and they cannot create a flow with its translation
// (CTA_NAT_DST, CTA_NAT_SRC).
package kconntrack

import (
	"context"
	"errors"
	"fmt"
	"net/netip"

	"github.com/svcproxy/svcproxy/pkg/proxy"
)

// IP protocol numbers of the flows the proxy cares about.
const (
	ProtoTCP  uint8 = 6
	ProtoUDP  uint8 = 17
	ProtoSCTP uint8 = 132
)

// ProtoNumber returns the IP protocol number of p, or 0 if unknown.
func ProtoNumber(p proxy.Protocol) uint8 {
	switch p {
	case proxy.TCP:
		return ProtoTCP
	case proxy.UDP:
		return ProtoUDP
	case proxy.SCTP:
		return ProtoSCTP
	}
	return 0
}

// Tuple is one direction of a flow.
type Tuple struct {
	Src, Dst netip.AddrPort
}

// Flow is the part of a conntrack entry the reconciler needs: the original
// tuple (what the client sent to), the reply tuple (who answers, i.e. the
// endpoint after DNAT), and the zone, which is part of the entry's identity.
// Replied is the kernel's "seen reply" status: a packet went the reply way.
type Flow struct {
	Proto   uint8
	Orig    Tuple
	Reply   Tuple
	Zone    uint16
	Replied bool
}

// String prints the flow the way conntrack -L does, roughly.
func (f Flow) String() string {
	return fmt.Sprintf("proto=%d %s>%s reply %s>%s zone=%d",
		f.Proto, f.Orig.Src, f.Orig.Dst, f.Reply.Src, f.Reply.Dst, f.Zone)
}

// Key identifies a flow for deletion: the kernel looks an entry up by its
// original tuple and zone.
type Key struct {
	Proto uint8
	Orig  Tuple
	Zone  uint16
}

// Key returns the flow's identity.
func (f Flow) Key() Key { return Key{Proto: f.Proto, Orig: f.Orig, Zone: f.Zone} }

// DNATed says whether the kernel translates the flow's destination: the
// one who answers is not the one the client addressed.
func (f Flow) DNATed() bool { return f.Orig.Dst != f.Reply.Src }

// Interface is what the reconciler needs of the conntrack table.
type Interface interface {
	// List calls visit for every flow of family, in kernel order, without
	// holding the whole table in memory. A dump the kernel reports as
	// interrupted (the table changed under it) still visits what it got and
	// then returns ErrInterrupted.
	List(ctx context.Context, family proxy.IPFamily, visit func(Flow)) error
	// Delete removes flows and returns how many the kernel no longer has
	// (deleted now, or already gone). It stops early, with ctx's error, when
	// ctx is done.
	Delete(ctx context.Context, family proxy.IPFamily, flows []Flow) (int, error)
}

// ErrInterrupted reports a dump that may have missed flows.
var ErrInterrupted = errors.New("conntrack dump interrupted")
