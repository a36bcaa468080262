// Package proxytest holds builders for Services, EndpointSlices and Nodes,
// and the shared packet-flow table that every backend's tracer must pass.
// It is imported by tests only.
package proxytest

import (
	"fmt"
	"net/netip"
	"slices"
	"testing"

	"github.com/svcproxy/svcproxy/pkg/pipeline/desired"
	"github.com/svcproxy/svcproxy/pkg/proxy"
)

// Verdict is the fate of a traced packet.
type Verdict string

// Packet fates.
const (
	// Accept: no service rule matched; the packet goes on untouched.
	Accept Verdict = "ACCEPT"
	// DNAT: the packet is sent to one of Result.Endpoints.
	DNAT Verdict = "DNAT"
	// Reject: ICMP port unreachable / connection refused.
	Reject Verdict = "REJECT"
	// Drop: silently discarded.
	Drop Verdict = "DROP"
)

// Flow is one packet to trace: a new connection from Source to Dest:DestPort.
type Flow struct {
	Name     string
	Source   netip.Addr
	Protocol proxy.Protocol
	Dest     netip.Addr
	DestPort uint16
	// InInterface is the interface the packet arrives on, for the interface
	// local-detection modes; "" means it does not come from a pod interface.
	InInterface string
	// FromHost marks a packet sent by the node itself (OUTPUT path).
	// Source is then one of the node's addresses.
	FromHost bool
	// FromPeer marks a packet a peer node tunnelled here by direct server
	// return, as it is once decapsulated (desired.Packet.FromPeer): Source
	// is the client, Dest the frontend it sent the packet to.
	FromPeer bool

	Want Result
}

// Result is what a tracer observed for a Flow.
type Result struct {
	Verdict Verdict
	// Endpoints is the set of possible DNAT destinations, sorted (DNAT only).
	Endpoints []netip.AddrPort
	// Masquerade is true when the packet leaves with the node's source
	// address (masquerade mark set, or hairpin).
	//
	// Hairpin convention: when Source is itself one of Endpoints, the packet
	// may be sent back to its own sender, which only works masqueraded, so
	// Masquerade is true even though only that one choice is marked. Tracers
	// report the same whatever endpoint they would pick.
	Masquerade bool
	// Tunneled are the Endpoints reached by direct server return, sorted:
	// the packet is tunnelled unchanged to the endpoint's node (DNAT only).
	// Masquerade then says whether the other endpoints are masqueraded.
	// Empty for every datapath that does not tunnel.
	Tunneled []netip.AddrPort
}

// Equal reports whether two results are the same.
func (r Result) Equal(o Result) bool {
	return r.Verdict == o.Verdict && r.Masquerade == o.Masquerade &&
		slices.Equal(r.Endpoints, o.Endpoints) && slices.Equal(r.Tunneled, o.Tunneled)
}

// Tracer runs one flow against a programmed state and reports its fate.
type Tracer func(t *testing.T, state *desired.State, flow Flow) Result

// EPs is a convenience for building expected endpoint sets: EPs("10.0.1.1:80", ...).
func EPs(addrs ...string) []netip.AddrPort {
	out := make([]netip.AddrPort, 0, len(addrs))
	for _, a := range addrs {
		out = append(out, netip.MustParseAddrPort(a))
	}
	slices.SortFunc(out, netip.AddrPort.Compare)
	return out
}

// String formats a result for test failures: "DNAT [a b] masq".
func (r Result) String() string {
	s := string(r.Verdict)
	if len(r.Endpoints) > 0 {
		s += " " + fmt.Sprint(r.Endpoints)
	}
	if r.Masquerade {
		s += " masq"
	}
	if len(r.Tunneled) > 0 {
		s += " tunnel " + fmt.Sprint(r.Tunneled)
	}
	return s
}
