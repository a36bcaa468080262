// Package explain tells how this node's programmed dataplane handles one
// packet: which Service port and frontend it hits, which traffic policy and
// endpoint set apply and why, affinity, masquerade, and the kernel objects
// of the running backend that implement it. It reads a desired.State (as
// served by internal/debugstate) and never touches the kernel.
//
// The decision order is the reference semantics of pkg/proxy/proxytest's
// Evaluate (a test-only package, so it is restated here with reasons):
// cluster IP, then external IP, then load-balancer IP (source ranges), then
// node port; anything else is not a Service packet.
package explain

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"

	"github.com/svcproxy/svcproxy/pkg/proxy"
	"github.com/svcproxy/svcproxy/pkg/proxy/desired"
)

// Origin is where the packet comes from, as the caller knows it.
type Origin int

// Origins.
const (
	// OriginAuto classifies by Source with the local-traffic detector.
	OriginAuto Origin = iota
	// OriginPod is a pod on this node (--from-pod).
	OriginPod
	// OriginHost is the node itself (--from-host): the OUTPUT path.
	OriginHost
)

// Packet is the first packet of a new connection.
type Packet struct {
	Dest     netip.Addr
	Port     uint16
	Protocol proxy.Protocol
	// Source is optional; it decides pod-vs-external with a CIDR detector,
	// hairpin, and loadBalancerSourceRanges.
	Source netip.Addr
	Origin Origin
}

// Verdict is the fate of the packet.
type Verdict string

// Verdicts.
const (
	Accept Verdict = "ACCEPT (not a Service destination on this node; left alone)"
	DNAT   Verdict = "DNAT"
	Reject Verdict = "REJECT"
	Drop   Verdict = "DROP"
)

// Frontend kinds.
const (
	FrontendClusterIP    = "cluster IP"
	FrontendExternalIP   = "external IP"
	FrontendLoadBalancer = "load-balancer IP"
	FrontendNodePort     = "node port"
)

// Dispatch classes, named as desired.ServicePort's fields.
const (
	ClassInternal = "internal"
	ClassExternal = "external"
	ClassCluster  = "cluster"
)

// Explanation is the answer. Reasons are human sentences in decision order.
type Explanation struct {
	Packet   Packet
	Family   proxy.IPFamily
	Verdict  Verdict
	Port     *desired.ServicePort // nil when no service port matched
	Frontend string
	// Source is "pod", "host" or "external", as the dataplane will see it.
	Source string
	// Class is the dispatch used (internal, external or cluster); Policy
	// the traffic policy behind it.
	Class, Policy string
	Endpoints     []netip.AddrPort
	Masquerade    bool
	Affinity      int32
	Reasons       []string
}

func (e *Explanation) because(format string, args ...any) {
	e.Reasons = append(e.Reasons, fmt.Sprintf(format, args...))
}

// Explain decides what state does with pkt. state must be the family of
// pkt.Dest (see Pick).
func Explain(state *desired.State, pkt Packet) Explanation {
	e := Explanation{Packet: pkt, Family: state.Family}
	e.Source = classify(state, pkt, &e)
	if sp, known := matchClusterIP(state, pkt); known {
		if sp == nil {
			e.Frontend, e.Verdict = FrontendClusterIP, Reject
			e.because("%s is a cluster IP but no Service port %d/%s is defined on it: rejected (cluster-ips check)", pkt.Dest, pkt.Port, pkt.Protocol)
			return e
		}
		e.Port, e.Frontend = sp, FrontendClusterIP
		e.internal(state, sp)
		return e
	}
	if sp, frontend := matchExternal(state, pkt); sp != nil {
		e.Port, e.Frontend = sp, frontend
		if frontend == FrontendLoadBalancer && sp.AllowedSources != nil {
			if !e.sourceAllowed(sp) {
				return e
			}
		}
		e.external(sp)
		return e
	}
	if sp := matchNodePort(state, pkt, &e); sp != nil {
		e.Port, e.Frontend = sp, FrontendNodePort
		e.external(sp)
		return e
	}
	e.Verdict = Accept
	e.because("no cluster IP, external IP, load-balancer IP or node port of this node matches %s:%d/%s", pkt.Dest, pkt.Port, pkt.Protocol)
	return e
}

// Pick returns the state of dest's family among states, or nil.
func Pick(states []*desired.State, dest netip.Addr) *desired.State {
	for _, s := range states {
		if s.Family.Contains(dest) {
			return s
		}
	}
	return nil
}

// classify says how the dataplane will see the source, as Evaluate does.
func classify(state *desired.State, pkt Packet, e *Explanation) string {
	local := state.Masquerade.Local
	switch {
	case pkt.Origin == OriginHost:
		e.because("the packet comes from the node itself (OUTPUT path)")
		return "host"
	case local.Mode == desired.LocalNone:
		if pkt.Origin == OriginPod {
			e.because("no local-traffic detector is configured for %s (detectLocalMode has no input), so pod traffic cannot be told apart: it is treated as external", state.Family)
		}
		return "external"
	case local.Mode == desired.LocalCIDR:
		if pkt.Source.IsValid() {
			if slices.ContainsFunc(local.CIDRs, func(p netip.Prefix) bool { return p.Contains(pkt.Source) }) {
				e.because("source %s is inside the pod CIDRs %v: pod traffic", pkt.Source, local.CIDRs)
				return "pod"
			}
			e.because("source %s is outside the pod CIDRs %v: external traffic", pkt.Source, local.CIDRs)
			return "external"
		}
		if pkt.Origin == OriginPod {
			e.because("pod traffic (source assumed inside the pod CIDRs %v)", local.CIDRs)
			return "pod"
		}
	default: // interface modes: the interface decides, which we cannot see
		if pkt.Origin == OriginPod {
			e.because("pod traffic (assumed to arrive on interface %s%s)", local.Interface, map[bool]string{true: "*"}[local.Mode == desired.LocalInterfacePrefix])
			return "pod"
		}
	}
	e.because("the packet comes from outside the node (use --from-pod or --from-host otherwise)")
	return "external"
}

func matchClusterIP(state *desired.State, pkt Packet) (sp *desired.ServicePort, known bool) {
	for _, p := range sortedPorts(state) {
		if p.ClusterIP != pkt.Dest {
			continue
		}
		known = true
		if p.Port == pkt.Port && p.Protocol == pkt.Protocol {
			return p, true
		}
	}
	return nil, known
}

func matchExternal(state *desired.State, pkt Packet) (*desired.ServicePort, string) {
	for _, sp := range sortedPorts(state) {
		if sp.Protocol != pkt.Protocol || sp.Port != pkt.Port {
			continue
		}
		if slices.Contains(sp.ExternalIPs, pkt.Dest) {
			return sp, FrontendExternalIP
		}
		if slices.Contains(sp.LoadBalancerIPs, pkt.Dest) {
			return sp, FrontendLoadBalancer
		}
	}
	return nil, ""
}

// matchNodePort finds the node port. With NodePorts.All the State does not
// list the host's addresses, so any destination outside the cluster IPs is
// assumed local; the reason says so.
func matchNodePort(state *desired.State, pkt Packet, e *Explanation) *desired.ServicePort {
	for _, sp := range sortedPorts(state) {
		if sp.NodePort == 0 || sp.NodePort != pkt.Port || sp.Protocol != pkt.Protocol {
			continue
		}
		switch {
		case state.NodePorts.All && pkt.Dest.IsLoopback():
			e.because("node port %d does not answer on loopback addresses", pkt.Port)
			return nil
		case state.NodePorts.All:
			e.because("node ports answer on every local address (nodePortAddresses unset or 0.0.0.0/0); assuming %s is one of this node's", pkt.Dest)
		case slices.Contains(state.NodePorts.IPs, pkt.Dest):
			e.because("%s is one of the nodePortAddresses %v", pkt.Dest, state.NodePorts.IPs)
		default:
			e.because("node port %d exists but %s is not among the nodePortAddresses %v", pkt.Port, pkt.Dest, state.NodePorts.IPs)
			return nil
		}
		return sp
	}
	return nil
}

func (e *Explanation) sourceAllowed(sp *desired.ServicePort) bool {
	src := e.Packet.Source
	if !src.IsValid() {
		e.because("loadBalancerSourceRanges %v apply; give --source to check the client (assuming it is allowed)", sp.AllowedSources)
		return true
	}
	if slices.ContainsFunc(sp.AllowedSources, func(p netip.Prefix) bool { return p.Contains(src) }) {
		e.because("source %s is allowed by loadBalancerSourceRanges %v", src, sp.AllowedSources)
		return true
	}
	e.Verdict = Drop
	e.because("source %s is outside loadBalancerSourceRanges %v: dropped by the firewall check", src, sp.AllowedSources)
	return false
}

func sortedPorts(state *desired.State) []*desired.ServicePort {
	out := make([]*desired.ServicePort, 0, len(state.Services))
	for _, sp := range state.Services {
		out = append(out, sp)
	}
	slices.SortFunc(out, func(a, b *desired.ServicePort) int { return a.Name.Compare(b.Name) })
	return out
}

func joinAddrPorts(eps []netip.AddrPort) string {
	s := make([]string, len(eps))
	for i, ep := range eps {
		s[i] = ep.String()
	}
	return strings.Join(s, ", ")
}
