// Package explain tells how this node's programmed dataplane handles one
// packet: which Service port and frontend it hits, which traffic policy and
// endpoint set apply and why, affinity, masquerade, and the kernel objects
// of the running backend that implement it. It reads a desired.State (as
// served by internal/debugstate) and never touches the kernel.
//
// The decisions are desired.Evaluate's, from the State the daemon
// programmed (its routes included): explain adds the reasons, never a
// policy of its own.
package explain

import (
	"fmt"
	"net/netip"
	"strings"

	"github.com/svcproxy/svcproxy/pkg/pipeline/desired"
	"github.com/svcproxy/svcproxy/pkg/pipeline/model"
	"github.com/svcproxy/svcproxy/pkg/proxy"
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
	// Quarantine is set when the packet's Service port is quarantined.
	Quarantine *Quarantine
	// Balancing is how the port's external traffic picks an endpoint
	// ("random" or "maglev"), for a packet DNATed through an external
	// frontend; "" otherwise.
	Balancing string
	// Forwarding is how the port's external traffic reaches endpoints on
	// other nodes ("snat" or "dsr"), for a packet DNATed through an
	// external frontend; "" otherwise. Tunneled are the endpoints this
	// packet reaches by direct server return.
	Forwarding string
	Tunneled   []Tunnel
}

func (e *Explanation) because(format string, args ...any) {
	e.Reasons = append(e.Reasons, fmt.Sprintf(format, args...))
}

// Explain tells what state does with pkt. state must be the family of
// pkt.Dest (see Pick). The decision is desired.Evaluate's; this only
// words it.
func Explain(state *desired.State, pkt Packet) Explanation {
	e := Explanation{Packet: pkt, Family: state.Family}
	src := e.classify(state, pkt)
	e.Source = src.String()
	out := desired.EvaluateFrom(state, desired.Packet{Source: pkt.Source, Protocol: pkt.Protocol,
		Dest: pkt.Dest, DestPort: pkt.Port, FromNode: pkt.Origin == OriginHost,
		// With NodePorts.All the State does not list the host's addresses:
		// any destination is assumed local (the reason says so).
		DestLocal: true}, src)
	e.Port, e.Frontend = out.Port, frontendNames[out.Frontend]
	switch {
	case out.Frontend == desired.ClusterIPFrontend && out.Port == nil:
		e.Verdict = Reject
		e.because("%s is a cluster IP but no Service port %d/%s is defined on it: rejected (cluster-ips check)", pkt.Dest, pkt.Port, pkt.Protocol)
	case out.ServiceCIDR.IsValid():
		e.Verdict = Drop
		e.because("%s is in the service range %s but no Service holds it: dropped (cluster-ips-check)", pkt.Dest, out.ServiceCIDR)
	case out.Frontend == desired.NoFrontend:
		e.noFrontend(state, pkt)
	case out.Frontend == desired.NodePortFrontend && out.Verdict == desired.Reject && out.Route == (desired.Route{}):
		e.Verdict = Reject
		e.because("node port %d on loopback: %s", pkt.Port, localhostReason(state.NodePorts.Localhost, pkt.Protocol))
	default:
		e.frontend(state, out)
		if out.Firewall != desired.FirewallDenied {
			e.route(out)
		}
		if e.Verdict == DNAT && out.Frontend != desired.ClusterIPFrontend {
			e.balancing(out.Port.ExternalBalancing)
			e.forwarding(state, out)
		}
	}
	return e
}

// balancing words the daemon's decision for external traffic. Only ebpf
// mode's experimental tc programs route by maglev, which explain cannot
// see, and the reader must not believe more than that.
func (e *Explanation) balancing(b proxy.Balancing) {
	if b == proxy.BalanceDefault {
		b = proxy.BalanceRandom // an older daemon, which had no other
	}
	e.Balancing = b.String()
	if b == proxy.BalanceMaglev {
		e.because("external traffic is to be balanced by maglev (annotation %s, else --external-lb-algorithm), but only ebpf mode's experimental tc programs route by it (--bpf-tc-interfaces, IPv4 TCP and UDP); everywhere else no datapath routes by it yet, and this node picks as for random",
			model.ExternalBalancingAnnotation)
	}
}

var frontendNames = map[desired.Frontend]string{
	desired.ClusterIPFrontend:    FrontendClusterIP,
	desired.ExternalIPFrontend:   FrontendExternalIP,
	desired.LoadBalancerFrontend: FrontendLoadBalancer,
	desired.NodePortFrontend:     FrontendNodePort,
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

// classify says how the dataplane will see the source, by the State's
// detector where the packet tells enough, else by what the caller said
// (--from-pod, --from-host), giving the reason either way.
func (e *Explanation) classify(state *desired.State, pkt Packet) desired.Source {
	local := state.Masquerade.Local
	switch {
	case pkt.Origin == OriginHost:
		e.because("the packet comes from the node itself (OUTPUT path)")
		return desired.FromNode
	case local.Mode == desired.LocalNone:
		if pkt.Origin == OriginPod {
			e.because("no local-traffic detector is configured for %s (detectLocalMode has no input), so pod traffic cannot be told apart: it is treated as external", state.Family)
		}
		return desired.FromOutside
	case local.Mode == desired.LocalCIDR:
		if pkt.Source.IsValid() {
			if state.Classify(desired.Packet{Source: pkt.Source}) == desired.FromPod {
				e.because("source %s is inside the pod CIDRs %v: pod traffic", pkt.Source, local.CIDRs)
				return desired.FromPod
			}
			e.because("source %s is outside the pod CIDRs %v: external traffic", pkt.Source, local.CIDRs)
			return desired.FromOutside
		}
		if pkt.Origin == OriginPod {
			e.because("pod traffic (source assumed inside the pod CIDRs %v)", local.CIDRs)
			return desired.FromPod
		}
	default: // interface modes: the interface decides, which we cannot see
		if pkt.Origin == OriginPod {
			e.because("pod traffic (assumed to arrive on interface %s%s)", local.Interface, map[bool]string{true: "*"}[local.Mode == desired.LocalInterfacePrefix])
			return desired.FromPod
		}
	}
	e.because("the packet comes from outside the node (use --from-pod or --from-host otherwise)")
	return desired.FromOutside
}

// frontend words how the packet matched: node-port addresses and the
// loadBalancerSourceRanges check.
func (e *Explanation) frontend(state *desired.State, out desired.Outcome) {
	p := e.Packet
	if out.Frontend == desired.NodePortFrontend {
		if p.Dest.IsLoopback() {
			e.because("node port on loopback: %s", localhostReason(state.NodePorts.Localhost, p.Protocol))
		}
		if state.NodePorts.All {
			e.because("node ports answer on every local address (nodePortAddresses unset or 0.0.0.0/0); assuming %s is one of this node's", p.Dest)
		} else {
			e.because("%s is one of the nodePortAddresses %v", p.Dest, state.NodePorts.IPs)
		}
	}
	ranges := out.Port.AllowedSources
	switch out.Firewall {
	case desired.FirewallUnchecked:
		e.because("loadBalancerSourceRanges %v apply; give --source to check the client (assuming it is allowed)", ranges)
	case desired.FirewallAllowed:
		e.because("source %s is allowed by loadBalancerSourceRanges %v", p.Source, ranges)
	case desired.FirewallDenied:
		e.Verdict = Drop
		e.because("source %s is outside loadBalancerSourceRanges %v: dropped by the firewall check", p.Source, ranges)
	}
}

// noFrontend explains an ACCEPT: a node port on an address that does not
// take node ports gets its own reason.
func (e *Explanation) noFrontend(state *desired.State, pkt Packet) {
	e.Verdict = Accept
	for _, sp := range state.Services.All() {
		// Node ports are unique per protocol: the first match is the one.
		if sp.NodePort == 0 || sp.NodePort != pkt.Port || sp.Protocol != pkt.Protocol {
			continue
		}
		if pkt.Dest.IsLoopback() {
			e.because("node port %d on loopback: %s", pkt.Port, localhostReason(state.NodePorts.Localhost, pkt.Protocol))
		} else if state.NodePorts.All {
			e.because("node port %d does not answer on %s", pkt.Port, pkt.Dest)
		} else {
			e.because("node port %d exists but %s is not among the nodePortAddresses %v", pkt.Port, pkt.Dest, state.NodePorts.IPs)
		}
		break
	}
	e.because("no cluster IP, external IP, load-balancer IP or node port of this node matches %s:%d/%s", pkt.Dest, pkt.Port, pkt.Protocol)
}

// localhostReason words the daemon's localhost node-port decision for a
// packet of protocol proto (desired.DecideLocalhost made it).
func localhostReason(l desired.LocalhostNodePorts, proto proxy.Protocol) string {
	switch {
	case l == desired.LocalhostDNAT:
		return "DNATed like any node port (iptables localhostNodePorts; needs route_localnet)"
	case l.Rejects(proto) && l == desired.LocalhostProxied:
		return fmt.Sprintf("rejected and counted: the localhost proxy serves TCP only, not %s", proto)
	case l.Rejects(proto):
		return "rejected and counted (KubeProxyNFTablesLocalhostNodePorts on, but nodePortAddresses does not name loopback)"
	case l == desired.LocalhostProxied:
		return "not DNATed; svcproxy's userspace localhost proxy answers it and connects to the port's external endpoints"
	}
	return "node ports do not answer on loopback in this mode and configuration; nothing listens, so the kernel refuses it"
}

func joinAddrPorts(eps []netip.AddrPort) string {
	s := make([]string, len(eps))
	for i, ep := range eps {
		s[i] = ep.String()
	}
	return strings.Join(s, ", ")
}
