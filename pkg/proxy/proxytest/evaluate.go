package proxytest

import (
	"net/netip"
	"slices"
	"strings"

	"github.com/svcproxy/svcproxy/pkg/proxy/desired"
)

// Evaluate is the reference semantics of a desired.State: what must happen
// to flow. Every backend's tracer must agree with it on every case.
//
// Destinations are matched in this order, first match wins:
//
//  1. A cluster IP. A known protocol and port dispatch to Internal; any
//     other port on a known cluster IP is rejected.
//  2. An external IP with a known protocol and port: the external path.
//  3. A load-balancer IP with a known protocol and port: if AllowedSources is
//     set and the source is in none of them, DROP; else the external path.
//  4. A node port on an address that NodePorts accepts (All: any local
//     address of the node except loopback): the external path.
//  5. Anything else is ACCEPTed untouched.
//
// The source is a pod when the local detector says so (CIDR: source inside
// one of the CIDRs; interface modes: the in-interface matches), the host
// when flow.FromHost, and external otherwise.
//
// Masquerade (contract §5.0): cluster-IP traffic is masqueraded with
// Masquerade.All, or when a detector exists and the source is not a pod.
// The external path with externalTrafficPolicy Cluster always masquerades
// and uses External. With Local, pod traffic (only recognizable with a
// detector) short-circuits to Cluster without masquerade, host traffic to
// Cluster with masquerade, and anything else uses External and keeps its
// source. A dispatch without endpoints gives its Empty verdict. A DNAT whose
// possible endpoints include the source itself is a hairpin and masquerades.
func Evaluate(state *desired.State, flow Flow) Result {
	if !state.Family.Contains(flow.Dest) {
		return Result{Verdict: Accept}
	}
	src := classify(state, flow)
	if sp, known := matchClusterIP(state, flow); known {
		if sp == nil {
			return Result{Verdict: Reject}
		}
		masq := state.Masquerade.All || (state.Masquerade.Local.Mode != desired.LocalNone && src != srcPod)
		return dispatchResult(sp.Internal, masq, flow.Source)
	}
	for _, sp := range sortedPorts(state) {
		if sp.Protocol != flow.Protocol {
			continue
		}
		switch {
		case sp.Port == flow.DestPort && slices.Contains(sp.ExternalIPs, flow.Dest):
			return external(state, sp, src, flow)
		case sp.Port == flow.DestPort && slices.Contains(sp.LoadBalancerIPs, flow.Dest):
			if sp.AllowedSources != nil && !slices.ContainsFunc(sp.AllowedSources, func(p netip.Prefix) bool {
				return p.Contains(flow.Source)
			}) {
				return Result{Verdict: Drop}
			}
			return external(state, sp, src, flow)
		}
	}
	if acceptsNodePorts(state, flow.Dest) {
		for _, sp := range sortedPorts(state) {
			if sp.NodePort != 0 && sp.NodePort == flow.DestPort && sp.Protocol == flow.Protocol {
				return external(state, sp, src, flow)
			}
		}
	}
	return Result{Verdict: Accept}
}

type sourceClass int

const (
	srcExternal sourceClass = iota
	srcPod
	srcHost
)

func classify(state *desired.State, flow Flow) sourceClass {
	local := state.Masquerade.Local
	switch {
	case flow.FromHost:
		return srcHost
	case local.Mode == desired.LocalCIDR && slices.ContainsFunc(local.CIDRs, func(p netip.Prefix) bool {
		return p.Contains(flow.Source)
	}):
		return srcPod
	case local.Mode == desired.LocalInterface && flow.InInterface == local.Interface:
		return srcPod
	case local.Mode == desired.LocalInterfacePrefix && flow.InInterface != "" &&
		strings.HasPrefix(flow.InInterface, local.Interface):
		return srcPod
	}
	return srcExternal
}

// matchClusterIP finds the service port flow addresses on a cluster IP. It
// returns known=true with a nil port when the IP is a cluster IP but no port
// of it matches, which is rejected.
func matchClusterIP(state *desired.State, flow Flow) (sp *desired.ServicePort, known bool) {
	for _, p := range state.Services {
		if p.ClusterIP != flow.Dest {
			continue
		}
		known = true
		if p.Port == flow.DestPort && p.Protocol == flow.Protocol {
			return p, true
		}
	}
	return nil, known
}

// external is the path of traffic to external IPs, LB IPs and node ports.
func external(state *desired.State, sp *desired.ServicePort, src sourceClass, flow Flow) Result {
	if !sp.ExternalLocal {
		return dispatchResult(sp.External, true, flow.Source)
	}
	switch src {
	case srcPod:
		return dispatchResult(sp.Cluster, false, flow.Source)
	case srcHost:
		return dispatchResult(sp.Cluster, true, flow.Source)
	}
	return dispatchResult(sp.External, false, flow.Source)
}

func dispatchResult(d desired.Dispatch, masq bool, source netip.Addr) Result {
	if len(d.Endpoints) == 0 {
		if d.Empty == desired.Drop {
			return Result{Verdict: Drop}
		}
		return Result{Verdict: Reject}
	}
	r := Result{Verdict: DNAT, Masquerade: masq}
	for _, ep := range d.Endpoints {
		r.Endpoints = append(r.Endpoints, ep.AddrPort())
		if ep.IP == source {
			r.Masquerade = true // hairpin: the endpoint may be the client itself
		}
	}
	slices.SortFunc(r.Endpoints, netip.AddrPort.Compare)
	return r
}

// acceptsNodePorts reports whether node ports answer on dest.
func acceptsNodePorts(state *desired.State, dest netip.Addr) bool {
	if !state.NodePorts.All {
		return slices.Contains(state.NodePorts.IPs, dest)
	}
	return !dest.IsLoopback() && slices.Contains(LocalAddrs(state), dest)
}

// sortedPorts lists the state's ports in name order, so that overlapping
// frontends (which validation normally prevents) resolve deterministically.
func sortedPorts(state *desired.State) []*desired.ServicePort {
	out := make([]*desired.ServicePort, 0, len(state.Services))
	for _, sp := range state.Services {
		out = append(out, sp)
	}
	slices.SortFunc(out, func(a, b *desired.ServicePort) int { return a.Name.Compare(b.Name) })
	return out
}
