package nftables

import (
	"fmt"
	"net/netip"
	"strconv"
	"time"

	"sigs.k8s.io/knftables"

	"github.com/svcproxy/svcproxy/pkg/proxy/desired"
)

// svcContext is one service port being rendered.
type svcContext struct {
	c     *config
	sp    *desired.ServicePort
	proto string
	p     *part
}

// renderService renders everything one service port needs: its frontend,
// endpoint, firewall and hairpin elements, plus the dispatch chains it uses
// (shared by shape, or its own when session affinity forces per-endpoint
// state).
func renderService(c *config, sp *desired.ServicePort) *part {
	s := &svcContext{c: c, sp: sp, proto: protoName(sp.Protocol), p: &part{}}
	cip := addrString(sp.ClusterIP)
	s.p.addElem(setClusterIPs, cip, "")

	internal, external, externalNP := s.verdicts()
	s.p.addElem(mapServiceIPs, s.ipKey(sp.ClusterIP, sp.Port), internal)
	for _, a := range s.externalAddrs() {
		s.p.addElem(mapServiceIPs, s.ipKey(a, sp.Port), external)
	}
	if sp.NodePort != 0 {
		s.p.addElem(mapServiceNodePorts, s.npKey(sp.NodePort), externalNP)
	}
	s.renderFirewall()
	s.renderHairpin()
	return s.p
}

func (s *svcContext) ipKey(a netip.Addr, port uint16) string {
	return joinElem([]string{addrString(a), s.proto, strconv.Itoa(int(port))})
}

func (s *svcContext) npKey(port uint16) string {
	return joinElem([]string{s.proto, strconv.Itoa(int(port))})
}

// externalAddrs lists external and LB IPs without duplicates, in order.
func (s *svcContext) externalAddrs() []netip.Addr {
	seen := map[netip.Addr]bool{}
	var out []netip.Addr
	for _, list := range [][]netip.Addr{s.sp.ExternalIPs, s.sp.LoadBalancerIPs} {
		for _, a := range list {
			if !seen[a] && s.c.fs.family == specFor(familyOf(a)).family {
				seen[a] = true
				out = append(out, a)
			}
		}
	}
	return out
}

// verdicts returns the service-ips / service-nodeports verdicts of the
// cluster IP, the external IPs and the node port, adding whatever chains and
// endpoint elements they lead to.
func (s *svcContext) verdicts() (internal, external, nodePort string) {
	if s.sp.AffinitySeconds > 0 {
		return s.affinityVerdicts()
	}
	sp := s.sp
	internal = s.dispatchVerdict(sp.Internal, func(n int) *chainSpec { return s.c.internalChain(n) },
		func() {
			s.endpointElems(mapInternalEPs, []string{addrString(sp.ClusterIP), s.proto, strconv.Itoa(int(sp.Port))}, sp.Internal)
		})
	external = s.externalVerdict(ipFrontend)
	if sp.NodePort != 0 {
		nodePort = s.externalVerdict(nodePortFrontend)
	}
	return internal, external, nodePort
}

// dispatchVerdict is "goto <shared chain>" for a non-empty dispatch (adding
// the chain and, through addElems, the endpoint elements), else the empty
// verdict.
func (s *svcContext) dispatchVerdict(d desired.Dispatch, chain func(int) *chainSpec, addElems func()) string {
	if len(d.Endpoints) == 0 {
		return emptyVerdict(d.Empty)
	}
	ch := chain(len(d.Endpoints))
	s.p.addChain(ch)
	addElems()
	return "goto " + ch.name
}

// frontendKeys lists the endpoint-map key prefixes of the frontends of kind.
func (s *svcContext) frontendKeys(kind frontendKind) [][]string {
	if kind == nodePortFrontend {
		return [][]string{{s.proto, strconv.Itoa(int(s.sp.NodePort))}}
	}
	var keys [][]string
	for _, a := range s.externalAddrs() {
		keys = append(keys, []string{addrString(a), s.proto, strconv.Itoa(int(s.sp.Port))})
	}
	return keys
}

func (s *svcContext) externalVerdict(kind frontendKind) string {
	sp := s.sp
	extMap, cluMap := mapExternalEPs, mapClusterEPs
	if kind == nodePortFrontend {
		extMap, cluMap = mapExternalNodePortEP, mapClusterNodePortEP
	}
	elems := func(m string, d desired.Dispatch) func() {
		return func() {
			for _, k := range s.frontendKeys(kind) {
				s.endpointElems(m, k, d)
			}
		}
	}
	if !sp.ExternalLocal {
		return s.dispatchVerdict(sp.External, func(n int) *chainSpec { return s.c.externalChain(kind, n) }, elems(extMap, sp.External))
	}
	toCluster := s.dispatchVerdict(sp.Cluster, func(n int) *chainSpec { return s.c.clusterChain(kind, n) }, elems(cluMap, sp.Cluster))
	external := []string{emptyVerdict(sp.External.Empty)}
	if n := len(sp.External.Endpoints); n > 0 {
		external = []string{s.c.dnatFromMap(kind, extMap, n)}
		elems(extMap, sp.External)()
	}
	name := "etp-local-"
	if kind == nodePortFrontend {
		name = "etp-local-nodeport-"
	}
	ch := sharedChain(name+emptyName(sp.External)+"-"+emptyName(sp.Cluster), s.c.localRules(toCluster, external)...)
	s.p.addChain(ch)
	return "goto " + ch.name
}

// endpointElems adds one element per endpoint slot of a frontend.
func (s *svcContext) endpointElems(m string, frontend []string, d desired.Dispatch) {
	for i, ep := range d.Endpoints {
		key := append(append([]string{}, frontend...), strconv.Itoa(i))
		s.p.addElem(m, joinElem(key), joinElem([]string{addrString(ep.IP), strconv.Itoa(int(ep.Port))}))
	}
}

// affinityVerdicts renders ClientIP affinity. The choice must be remembered
// per client and endpoint, and nft (1.0.6) cannot build a lookup key from a
// constant endpoint plus the client address, so each endpoint gets a
// dynamic set of its clients with the service's timeout and the service
// port gets its own dispatch chains. Both are per-service kernel objects,
// accepted only for affinity services.
func (s *svcContext) affinityVerdicts() (internal, external, nodePort string) {
	sp := s.sp
	seen := map[netip.AddrPort]bool{}
	for _, d := range []desired.Dispatch{sp.Internal, sp.External, sp.Cluster} {
		for _, ep := range d.Endpoints {
			if !seen[ep.AddrPort()] {
				seen[ep.AddrPort()] = true
				s.p.addSet(&setSpec{name: affinitySet(sp.Name, ep.AddrPort()), typ: s.c.fs.addrType,
					flags:   []knftables.SetFlag{knftables.DynamicFlag, knftables.TimeoutFlag},
					timeout: time.Duration(sp.AffinitySeconds) * time.Second})
			}
		}
	}
	own := func(class string, pre []string, d desired.Dispatch) string {
		if len(d.Endpoints) == 0 {
			return emptyVerdict(d.Empty)
		}
		ch := &chainSpec{name: affinityChain(class, sp.Name), rules: append(append([]string{}, pre...), s.c.affinityRules(s, d.Endpoints)...)}
		s.p.addChain(ch)
		return "goto " + ch.name
	}
	internal = own("internal", s.c.masqInternal, sp.Internal)
	if !sp.ExternalLocal {
		external = own("external", []string{"jump " + chainMarkMasq}, sp.External)
	} else {
		toCluster := own("cluster", nil, sp.Cluster)
		ext := []string{emptyVerdict(sp.External.Empty)}
		if len(sp.External.Endpoints) > 0 {
			ext = s.c.affinityRules(s, sp.External.Endpoints)
		}
		ch := &chainSpec{name: affinityChain("external", sp.Name), rules: s.c.localRules(toCluster, ext)}
		s.p.addChain(ch)
		external = "goto " + ch.name
	}
	if sp.NodePort != 0 {
		nodePort = external
	}
	return internal, external, nodePort
}

// renderFirewall restricts LB IPs to AllowedSources: a guard set of
// filtered frontends and an allow set of frontend·source-prefix pairs.
func (s *svcContext) renderFirewall() {
	if s.sp.AllowedSources == nil {
		return
	}
	for _, lb := range s.sp.LoadBalancerIPs {
		if s.c.fs.family != specFor(familyOf(lb)).family {
			continue
		}
		key := s.ipKey(lb, s.sp.Port)
		s.p.addElem(setFirewallIPs, key, "")
		for _, src := range s.sp.AllowedSources {
			if specFor(familyOf(src.Addr())).family == s.c.fs.family {
				s.p.addElem(setFirewallAllow, joinElem([]string{key, prefixString(src)}), "")
			}
		}
	}
}

// renderHairpin lets an endpoint that reaches itself through the service be
// masqueraded (checked after DNAT, in masquerading).
func (s *svcContext) renderHairpin() {
	for _, d := range []desired.Dispatch{s.sp.Internal, s.sp.External, s.sp.Cluster} {
		for _, ep := range d.Endpoints {
			a := addrString(ep.IP)
			s.p.addElem(setHairpin, fmt.Sprintf("%s . %s", a, a), "")
		}
	}
}
