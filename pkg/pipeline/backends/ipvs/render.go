package ipvs

import (
	"net/netip"
	"slices"

	"github.com/svcproxy/svcproxy/pkg/kipset"
	"github.com/svcproxy/svcproxy/pkg/kipvs"
	"github.com/svcproxy/svcproxy/pkg/pipeline/desired"
	"github.com/svcproxy/svcproxy/pkg/proxy"
)

// part is everything one service port needs in the kernel: its virtual
// servers with their real servers, the addresses it parks on kube-ipvs0,
// and its ipset members. Render is pure; the store diffs parts.
type part struct {
	vs      []vsSpec
	addrs   []netip.Addr
	entries []setEntry
}

// vsSpec is one virtual server and its real servers, sorted by address,
// which serve at weight 1. On the kernel side of the store idle holds the
// real servers that do not serve, by weight: 0 while they drain (the
// reaper deletes them), another if read back so.
type vsSpec struct {
	svc   kipvs.Service
	dests []netip.AddrPort
	idle  map[netip.AddrPort]int
}

// setEntry is one member of one ipset (by family-specific name).
type setEntry struct {
	set   string
	entry kipset.Entry
}

// renderConfig holds what rendering needs beyond the service port.
type renderConfig struct {
	family proxy.IPFamily
	// nodePortAddrs are the addresses node ports get a virtual server on
	// (desired.NodePortAddrs.Bound).
	nodePortAddrs []netip.Addr
	// masq is the State's masquerade policy, which the iptables rules
	// render; routesOf gives each port's routes (State.RoutesOf).
	masq     desired.Masquerade
	routesOf func(*desired.ServicePort) desired.Routes
	// err is the first route the rules cannot express (render_routes.go).
	err error
}

// newRenderConfig is the rendering configuration of st.
func newRenderConfig(st *desired.State) *renderConfig {
	return &renderConfig{family: st.Family, nodePortAddrs: st.NodePorts.Bound, masq: st.Masquerade, routesOf: st.RoutesOf}
}

// renderService renders one service port from its routes
// (render_routes.go): the cluster IP's virtual server gets the cluster-IP
// path's dispatch, external IPs, LB IPs and node ports the external path's,
// and the external path's masquerade decides the -LOCAL sets.
func renderService(cfg *renderConfig, sp *desired.ServicePort) *part {
	r := cfg.routes(sp)
	internal, external := sp.Dispatch(r.clusterIP.Set), sp.Dispatch(r.external.Set)
	p := &part{}
	proto := ProtocolOf(sp.Protocol)
	set := func(base string, e kipset.Entry) {
		p.entries = append(p.entries, setEntry{set: setName(cfg.family, base), entry: e})
	}
	ipPort := func(ip netip.Addr, port uint16) kipset.Entry {
		return kipset.Entry{IP: ip, Protocol: uint8(proto), Port: port}
	}
	frontend := func(ip netip.Addr, port uint16, d desired.Dispatch, onDummy bool) {
		p.vs = append(p.vs, vsSpec{svc: virtualServer(sp, ip, port), dests: realServers(d)})
		if onDummy {
			p.addrs = append(p.addrs, ip)
			set(setIPVSIPs, kipset.Entry{IP: ip})
		}
	}

	// Traffic the external path leaves unmasqueraded goes through the
	// -LOCAL sets, whose rules skip the masquerade mark.
	keepSource := !r.external.Masquerade
	frontend(sp.ClusterIP, sp.Port, internal, true)
	set(setClusterIP, ipPort(sp.ClusterIP, sp.Port))
	for _, ip := range sp.ExternalIPs {
		frontend(ip, sp.Port, external, true)
		set(pick(keepSource, setExternalIPLocal, setExternalIP), ipPort(ip, sp.Port))
	}
	for _, ip := range sp.LoadBalancerIPs {
		frontend(ip, sp.Port, external, true)
		set(setLoadBalancer, ipPort(ip, sp.Port))
		if keepSource {
			set(setLoadBalancerLocal, ipPort(ip, sp.Port))
		}
		renderSourceRanges(sp, ip, proto, set)
	}
	if sp.NodePort != 0 {
		renderNodePort(cfg, sp, external, keepSource, p, set)
	}
	if sp.HealthCheckNodePort != 0 {
		set(setHealthCheckNodePort, kipset.Entry{Port: sp.HealthCheckNodePort})
	}
	for _, d := range []desired.Dispatch{internal, external} {
		for _, ep := range d.Endpoints {
			set(setLoopBack, kipset.Entry{IP: ep.IP, Protocol: uint8(proto), Port: ep.Port, IP2: ep.IP})
		}
	}
	return p
}

// renderNodePort adds a virtual server per node-port address. TCP and UDP
// node ports are bitmap:port members (any local address); SCTP ones are
// address·port members, as upstream keys them.
func renderNodePort(cfg *renderConfig, sp *desired.ServicePort, external desired.Dispatch, keepSource bool,
	p *part, set func(string, kipset.Entry),
) {
	proto := ProtocolOf(sp.Protocol)
	for _, ip := range cfg.nodePortAddrs {
		p.vs = append(p.vs, vsSpec{svc: virtualServer(sp, ip, sp.NodePort), dests: realServers(external)})
	}
	var base, local string
	switch sp.Protocol {
	case proxy.UDP:
		base, local = setNodePortUDP, setNodePortLocalUDP
	case proxy.SCTP:
		for _, ip := range cfg.nodePortAddrs {
			e := kipset.Entry{IP: ip, Protocol: uint8(proto), Port: sp.NodePort}
			set(pick(keepSource, setNodePortLocalSCTP, setNodePortSCTP), e)
		}
		return
	default:
		base, local = setNodePortTCP, setNodePortLocalTCP
	}
	set(pick(keepSource, local, base), kipset.Entry{Port: sp.NodePort})
}

// renderSourceRanges fills the loadBalancerSourceRanges firewall of one LB
// IP. LB IPs that State allows as sources (the node is inside a range) go
// to KUBE-LOAD-BALANCER-SOURCE-IP as upstream puts them; every other range
// to KUBE-LOAD-BALANCER-SOURCE-CIDR. hash:net members cannot be /0, so a
// /0 range becomes its two halves.
func renderSourceRanges(sp *desired.ServicePort, lbIP netip.Addr, proto kipvs.Protocol, set func(string, kipset.Entry)) {
	if sp.AllowedSources == nil {
		return
	}
	set(setLoadBalancerFW, kipset.Entry{IP: lbIP, Protocol: uint8(proto), Port: sp.Port})
	for _, src := range sp.AllowedSources {
		e := kipset.Entry{IP: lbIP, Protocol: uint8(proto), Port: sp.Port}
		if src.IsSingleIP() && slices.Contains(sp.LoadBalancerIPs, src.Addr()) {
			e.IP2 = src.Addr()
			set(setLBSourceIP, e)
			continue
		}
		for _, half := range splitZero(src) {
			e.Net = half
			set(setLBSourceCIDR, e)
		}
	}
}

func splitZero(p netip.Prefix) []netip.Prefix {
	if p.Bits() != 0 {
		return []netip.Prefix{p}
	}
	lo := netip.PrefixFrom(p.Addr(), 1)
	hiBytes := p.Addr().AsSlice()
	hiBytes[0] |= 0x80
	hi, _ := netip.AddrFromSlice(hiBytes)
	return []netip.Prefix{lo, netip.PrefixFrom(hi, 1)}
}

// virtualServer is the IPVS service of one frontend, with the scheduler
// Compute decided (Scheduling, the port's Setting; a State computed
// without it, as the shared test cases are, decided none: round robin,
// the kernel's usual). ClientIP affinity is IPVS persistence with the
// affinity timeout.
func virtualServer(sp *desired.ServicePort, ip netip.Addr, port uint16) kipvs.Service {
	svc := kipvs.Service{
		ServiceKey: kipvs.ServiceKey{Addr: ip, Protocol: ProtocolOf(sp.Protocol), Port: port},
		Scheduler:  kipvs.RoundRobin,
	}
	if sp.Setting != nil {
		svc.Scheduler = sp.Setting.Value
	}
	if sp.AffinitySeconds > 0 {
		svc.Flags |= kipvs.FlagPersistent
		svc.Timeout = uint32(sp.AffinitySeconds)
	}
	return svc
}

func realServers(d desired.Dispatch) []netip.AddrPort {
	out := make([]netip.AddrPort, 0, len(d.Endpoints))
	for _, ep := range d.Endpoints {
		out = append(out, ep.AddrPort())
	}
	return out
}

// ProtocolOf is the IPVS protocol of a service port's protocol (what the
// kernel keys virtual servers by).
func ProtocolOf(p proxy.Protocol) kipvs.Protocol {
	switch p {
	case proxy.UDP:
		return kipvs.UDP
	case proxy.SCTP:
		return kipvs.SCTP
	}
	return kipvs.TCP
}

func pick(cond bool, yes, no string) string {
	if cond {
		return yes
	}
	return no
}
