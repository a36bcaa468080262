package desired

import (
	"net/netip"
	"slices"
	"strings"

	"github.com/svcproxy/svcproxy/pkg/proxy"
)

// Packet is the first packet of a new connection, as the dataplane sees it.
type Packet struct {
	// Source may be invalid (unknown, for explanations): then it is not
	// checked against source ranges and cannot be a hairpin.
	Source   netip.Addr
	Protocol proxy.Protocol
	Dest     netip.Addr
	DestPort uint16
	// InInterface is the interface the packet arrives on, for the
	// interface local-detection modes; "" means not a pod interface.
	InInterface string
	// FromNode marks a packet the node sends itself (OUTPUT path).
	FromNode bool
	// DestLocal says the kernel calls Dest one of this node's addresses
	// (fib daddr type local). Only node ports with NodePorts.All read it:
	// the State does not list the host's addresses then.
	DestLocal bool
	// FromPeer marks a packet a peer tunnelled here by direct server
	// return, as it is once decapsulated: Source is the client, Dest the
	// frontend the client sent it to on the peer.
	FromPeer bool
}

// Frontend is the kind of frontend a packet hit.
type Frontend uint8

// The frontends, in the order Evaluate matches them.
const (
	NoFrontend Frontend = iota
	ClusterIPFrontend
	ExternalIPFrontend
	LoadBalancerFrontend
	NodePortFrontend
)

// Firewall is what the loadBalancerSourceRanges check said.
type Firewall uint8

// The results of the source-range check.
const (
	// FirewallNone: no check (not an LB IP, or no ranges).
	FirewallNone Firewall = iota
	FirewallAllowed
	FirewallDenied
	// FirewallUnchecked: ranges apply but the packet's source is unknown;
	// Evaluate lets it through.
	FirewallUnchecked
)

// Outcome is where a packet goes and why.
type Outcome struct {
	// Verdict is DNAT, Reject, Drop or Accept (no service rule matched).
	Verdict Verdict
	// Port is the service port hit; nil when none matched (including an
	// unknown port on a cluster IP, which is rejected).
	Port     *ServicePort
	Frontend Frontend
	Source   Source
	Firewall Firewall
	// Route is the decision applied; zero when no dispatch was reached.
	Route Route
	// Endpoints are the possible DNAT destinations, sorted (DNAT only).
	Endpoints []Endpoint
	// Masquerade is the route's, or true for a hairpin (DNAT only); with
	// Tunneled, it describes the other endpoints (false when there are none).
	Masquerade bool
	// Hairpin: the source is itself one of Endpoints, so the reply only
	// comes back through this node when the packet is masqueraded.
	Hairpin bool
	// Tunneled are the Endpoints reached by direct server return: the
	// packet is tunnelled unchanged to the endpoint's node (ServicePort.DSR),
	// which delivers it with the client's address and answers the client
	// itself. Only external traffic from outside the node (FromOutside) of a
	// port with a DSR is, from outside the cluster too (not one of
	// State.ClusterSources), to a node port only on a node IP (the
	// addresses peers know this node by: a peer accepts a tunnelled
	// node-port flow to those alone); never the client itself (a hairpin).
	Tunneled []Endpoint
	// ServiceCIDR is the service range of an address no frontend holds
	// (dropped); invalid otherwise.
	ServiceCIDR netip.Prefix
}

// Evaluate is the reference semantics of a State: what happens to pkt.
// Every backend's tracer, the shared flow cases and `svcproxy explain`
// agree with it. Destinations are matched in this order, first match wins:
//
//  1. A cluster IP: a known protocol and port takes the cluster-IP route;
//     any other port on a known cluster IP is rejected.
//  2. An external IP with a known protocol and port: the external route.
//  3. An LB IP with a known protocol and port: DROP when AllowedSources is
//     set and holds no prefix with the source; else the external route.
//  4. A node port on an address that NodePorts accepts (All: DestLocal and
//     not loopback): the external route.
//     A node port on a loopback address that the localhost decision
//     rejects (NodePorts.Localhost.Rejects) is REJECTed (and counted).
//  5. An address in ServiceCIDRs (only set where the backend drops these:
//     nftables mode) is DROPped: no Service holds it.
//  6. Anything else is ACCEPTed untouched (a TCP node port on loopback
//     under LocalhostProxied: the userspace proxy answers it).
//
// A packet FromPeer matches only the frontends of ports with a DSR: their
// external and LB IPs, and their node ports on a peer's address (State.Peers);
// DSR.In serves it, the client's address kept. Anything else is not a flow
// of ours and goes on untouched (ACCEPT).
func Evaluate(s *State, pkt Packet) Outcome {
	return EvaluateFrom(s, pkt, s.Classify(pkt))
}

// EvaluateFrom is Evaluate with the source class given, for callers that
// know it better than the packet says (explain's --from-pod without a
// source address).
func EvaluateFrom(s *State, pkt Packet, src Source) Outcome {
	out := Outcome{Verdict: Accept, Source: src}
	if !s.Family.Contains(pkt.Dest) {
		return out
	}
	if pkt.FromPeer {
		out.tunnelIn(s, pkt)
		return out
	}
	if sp, known := matchClusterIP(s, pkt); known {
		out.Frontend = ClusterIPFrontend
		if sp == nil {
			out.Verdict = Reject
			return out
		}
		out.route(s, sp, ClusterIPPath, pkt)
		return out
	}
	ports := sortedPorts(s)
	if sp, fe := matchExternal(ports, pkt); sp != nil {
		out.Frontend = fe
		if fe == LoadBalancerFrontend && sp.AllowedSources != nil {
			if out.Firewall = firewall(sp, pkt.Source); out.Firewall == FirewallDenied {
				out.Port, out.Verdict = sp, Drop
				return out
			}
		}
		out.route(s, sp, ExternalPath, pkt)
		return out
	}
	if sp := matchNodePort(s, ports, pkt); sp != nil {
		out.Frontend = NodePortFrontend
		out.route(s, sp, ExternalPath, pkt)
		return out
	}
	if pkt.Dest.IsLoopback() && s.NodePorts.Localhost.Rejects(pkt.Protocol) {
		if sp := nodePortOf(ports, pkt); sp != nil {
			out.Frontend, out.Port, out.Verdict = NodePortFrontend, sp, Reject
			return out
		}
	}
	for _, p := range s.ServiceCIDRs {
		if p.Contains(pkt.Dest) {
			out.Verdict, out.ServiceCIDR = Drop, p
			break
		}
	}
	return out
}

// Classify tells the packet's source class by the State's local-traffic
// detector: the CIDRs hold the source, or the in-interface is the bridge
// or has the prefix.
func (s *State) Classify(pkt Packet) Source {
	local := s.Masquerade.Local
	switch {
	case pkt.FromNode:
		return FromNode
	case local.Mode == LocalCIDR && pkt.Source.IsValid() && slices.ContainsFunc(local.CIDRs, func(p netip.Prefix) bool {
		return p.Contains(pkt.Source)
	}):
		return FromPod
	case local.Mode == LocalInterface && pkt.InInterface == local.Interface:
		return FromPod
	case local.Mode == LocalInterfacePrefix && pkt.InInterface != "" && strings.HasPrefix(pkt.InInterface, local.Interface):
		return FromPod
	}
	return FromOutside
}

// route applies sp's route for path and the outcome's source class.
func (o *Outcome) route(s *State, sp *ServicePort, path Path, pkt Packet) {
	routes := s.RoutesOf(sp)
	o.Port, o.Route = sp, routes[path][o.Source]
	d := sp.Dispatch(o.Route.Set)
	if len(d.Endpoints) == 0 {
		o.Verdict = d.Empty
		return
	}
	o.Verdict, o.Masquerade, o.Endpoints = DNAT, o.Route.Masquerade, d.Endpoints
	for _, ep := range d.Endpoints {
		if pkt.Source.IsValid() && ep.IP == pkt.Source {
			o.Hairpin, o.Masquerade = true, true
		}
	}
	if sp.DSR != nil && path == ExternalPath && o.Source == FromOutside && !s.InCluster(pkt.Source) && o.Route.Set == SetExternal &&
		(o.Frontend != NodePortFrontend || slices.Contains(s.NodeIPs, pkt.Dest)) {
		o.tunnel(sp.DSR, pkt)
	}
}

// matchClusterIP finds the service port pkt addresses on a cluster IP. It
// returns known=true with a nil port when the IP is a cluster IP but no
// port of it matches.
func matchClusterIP(s *State, pkt Packet) (sp *ServicePort, known bool) {
	for _, p := range s.Services.All() {
		if p.ClusterIP != pkt.Dest {
			continue
		}
		known = true
		if p.Port == pkt.DestPort && p.Protocol == pkt.Protocol {
			return p, true
		}
	}
	return nil, known
}

func matchExternal(ports []*ServicePort, pkt Packet) (*ServicePort, Frontend) {
	for _, sp := range ports {
		if sp.Protocol != pkt.Protocol || sp.Port != pkt.DestPort {
			continue
		}
		if slices.Contains(sp.ExternalIPs, pkt.Dest) {
			return sp, ExternalIPFrontend
		}
		if slices.Contains(sp.LoadBalancerIPs, pkt.Dest) {
			return sp, LoadBalancerFrontend
		}
	}
	return nil, NoFrontend
}

func matchNodePort(s *State, ports []*ServicePort, pkt Packet) *ServicePort {
	if !s.AcceptsNodePorts(pkt.Dest, pkt.DestLocal) {
		return nil
	}
	return nodePortOf(ports, pkt)
}

// nodePortOf finds the service port whose node port pkt addresses.
func nodePortOf(ports []*ServicePort, pkt Packet) *ServicePort {
	for _, sp := range ports {
		if sp.NodePort != 0 && sp.NodePort == pkt.DestPort && sp.Protocol == pkt.Protocol {
			return sp
		}
	}
	return nil
}

// AcceptsNodePorts reports whether node ports answer on dest; local says
// whether dest is one of the node's addresses, which only matters with
// NodePorts.All (any local address; loopback only when DNATed).
func (s *State) AcceptsNodePorts(dest netip.Addr, local bool) bool {
	if !s.NodePorts.All {
		return slices.Contains(s.NodePorts.IPs, dest)
	}
	return local && (!dest.IsLoopback() || s.NodePorts.Localhost == LocalhostDNAT)
}

func firewall(sp *ServicePort, src netip.Addr) Firewall {
	switch {
	case !src.IsValid():
		return FirewallUnchecked
	case slices.ContainsFunc(sp.AllowedSources, func(p netip.Prefix) bool { return p.Contains(src) }):
		return FirewallAllowed
	}
	return FirewallDenied
}

// sortedPorts lists the state's ports in name order, so that overlapping
// frontends (which claims.go normally prevents) resolve deterministically.
func sortedPorts(s *State) []*ServicePort {
	out := make([]*ServicePort, 0, s.Services.Len())
	for _, sp := range s.Services.All() {
		out = append(out, sp)
	}
	slices.SortFunc(out, func(a, b *ServicePort) int { return a.Name.Compare(b.Name) })
	return out
}

// tunnel sets which of the outcome's endpoints d reaches by tunnel: all
// that d tunnels but the client itself, which is masqueraded (hairpin).
// Masquerade then describes the others.
func (o *Outcome) tunnel(d *DSR, pkt Packet) {
	for _, ep := range o.Endpoints {
		if _, ok := d.TunnelOf(ep.IP); ok && ep.IP != pkt.Source {
			o.Tunneled = append(o.Tunneled, ep)
		}
	}
	if len(o.Tunneled) == len(o.Endpoints) {
		o.Masquerade = false
	}
}

// tunnelIn is what a flow a peer tunnelled here meets (Packet.FromPeer):
// a frontend of a port with a DSR, served by its DSR.In, unmasqueraded.
func (o *Outcome) tunnelIn(s *State, pkt Packet) {
	ports := sortedPorts(s)
	sp, fe := matchExternal(ports, pkt)
	if sp == nil && slices.Contains(s.Peers, pkt.Dest) {
		sp, fe = nodePortOf(ports, pkt), NodePortFrontend
	}
	if sp == nil || sp.DSR == nil {
		return
	}
	o.Port, o.Frontend, o.Source = sp, fe, FromOutside
	if in := sp.DSR.In; len(in.Endpoints) == 0 {
		o.Verdict = in.Empty
	} else {
		o.Verdict, o.Endpoints = DNAT, in.Endpoints
	}
}
