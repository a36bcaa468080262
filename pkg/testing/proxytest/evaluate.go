package proxytest

import (
	"net/netip"
	"slices"

	"github.com/svcproxy/svcproxy/pkg/pipeline/desired"
)

// Evaluate is the reference semantics of a desired.State, desired.Evaluate,
// for a Flow: every backend's tracer must agree with it on every case. The
// standard world's host addresses (LocalAddrs) are what the kernel calls
// local, for node ports on every local address.
func Evaluate(state *desired.State, flow Flow) Result {
	out := desired.Evaluate(state, desired.Packet{
		Source: flow.Source, Protocol: flow.Protocol, Dest: flow.Dest, DestPort: flow.DestPort,
		InInterface: flow.InInterface, FromNode: flow.FromHost, FromPeer: flow.FromPeer,
		DestLocal: slices.Contains(LocalAddrs(state), flow.Dest),
	})
	return resultOf(out)
}

func resultOf(out desired.Outcome) Result {
	switch out.Verdict {
	case desired.Accept:
		return Result{Verdict: Accept}
	case desired.Drop:
		return Result{Verdict: Drop}
	case desired.Reject:
		return Result{Verdict: Reject}
	}
	r := Result{Verdict: DNAT, Masquerade: out.Masquerade, Endpoints: make([]netip.AddrPort, 0, len(out.Endpoints))}
	for _, ep := range out.Endpoints {
		r.Endpoints = append(r.Endpoints, ep.AddrPort())
	}
	for _, ep := range out.Tunneled {
		r.Tunneled = append(r.Tunneled, ep.AddrPort())
	}
	slices.SortFunc(r.Tunneled, netip.AddrPort.Compare)
	slices.SortFunc(r.Endpoints, netip.AddrPort.Compare)
	return r
}
