package nftables

import (
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"time"

	"sigs.k8s.io/knftables"

	"github.com/svcproxy/svcproxy/pkg/pipeline/desired"
)

// svcContext is one service port being rendered.
type svcContext struct {
	c      *config
	sp     *desired.ServicePort
	routes desired.Routes
	proto  string
	p      *part
	shard  int // of the dispatch chains and endpoint maps
	// buf builds element keys; values caches each endpoint's value, which
	// an own chain's inline maps repeat.
	buf      []byte
	values   []epString
	valueMap map[desired.Endpoint]string // values, once there are many
	// slotValues caches the slot values of each endpoint list, which every
	// frontend of a dispatch repeats (and the dispatches often share).
	slotValues []epsString
}

type epsString struct {
	eps []desired.Endpoint
	s   string
}

type epString struct {
	ep desired.Endpoint
	s  string
}

// renderService renders everything one service port needs: its frontend,
// endpoint, firewall and hairpin elements, plus the dispatch chains it uses
// (shared by shape, or its own when session affinity forces per-endpoint
// state).
func renderService(c *config, sp *desired.ServicePort) *part {
	s := &svcContext{c: c, sp: sp, routes: c.routesOf(sp), proto: protoName(sp.Protocol), p: &part{owner: &sp.Name}, shard: serviceShard(sp.Name),
		buf: c.scratch.buf}
	defer func() { c.scratch.buf = s.buf }()
	// Most elements are hairpin elements (one per endpoint address) and
	// slot groups (one per frontend and dispatch); sizing once saves the
	// slice's regrowth.
	n := len(sp.Internal.Endpoints)
	ext := s.externalAddrs()
	s.p.elems = c.scratch.takeElems(8 + 3*len(ext) + n)
	s.p.addElem(setClusterIPs, s.keep(appendAddrData(s.buf[:0], sp.ClusterIP)), "")

	fe := s.frontendsOf(ext)
	internal, external, externalNP := s.verdicts(fe)
	s.p.addElem(mapServiceIPs, fe.cluster, internal)
	for _, k := range fe.external {
		s.p.addElem(mapServiceIPs, k, external)
	}
	if sp.NodePort != 0 {
		s.p.addElem(mapServiceNodePorts, fe.nodePort, externalNP)
	}
	s.renderLocalhostElem()
	s.renderFirewall()
	s.renderHairpin()
	return s.p
}

// frontendData is the data of the key address · protocol · port
// (service-ips).
func (s *svcContext) frontendData(a netip.Addr, port uint16) string {
	return s.keep(appendPortData(appendAddrData(s.buf[:0], a), s.sp.Protocol, port))
}

// portData is the data of the key protocol · port (service-nodeports,
// the localhost reject map).
func (s *svcContext) portData(port uint16) string {
	return s.keep(appendPortData(s.buf[:0], s.sp.Protocol, port))
}

// frontends are the data of a service port's frontends: the keys of
// service-ips and service-nodeports, and of its slot groups in the
// endpoint maps (one string each, shared by both).
type frontends struct {
	cluster  string
	external []string // of the external and LB IPs, in externalAddrs' order
	nodePort string   // "": none
}

// frontendsOf is the data of the service port's frontends, ext its
// external and LB IPs.
func (s *svcContext) frontendsOf(ext []netip.Addr) frontends {
	fe := frontends{cluster: s.frontendData(s.sp.ClusterIP, s.sp.Port)}
	if len(ext) > 0 {
		fe.external = make([]string, len(ext))
		for i, a := range ext {
			fe.external[i] = s.frontendData(a, s.sp.Port)
		}
	}
	if s.sp.NodePort != 0 {
		fe.nodePort = s.portData(s.sp.NodePort)
	}
	return fe
}

// keep returns b, built in s.buf, as a string, and keeps the buffer.
func (s *svcContext) keep(b []byte) string {
	s.buf = b
	return string(b)
}

// epValue is the endpoint-map value address · port of ep. Values are
// cached per service port: a slice scan for the usual handful of
// endpoints, a map beyond that (slotOrder looks every slot's value up).
func (s *svcContext) epValue(ep desired.Endpoint) string {
	if s.valueMap != nil {
		if v, ok := s.valueMap[ep]; ok {
			return v
		}
	} else {
		for _, v := range s.values {
			if v.ep == ep {
				return v.s
			}
		}
	}
	b := append(ep.IP.Unmap().AppendTo(s.buf[:0]), elemSep...)
	v := s.keep(strconv.AppendUint(b, uint64(ep.Port), 10))
	s.values = append(s.values, epString{ep, v})
	switch {
	case s.valueMap != nil:
		s.valueMap[ep] = v
	case len(s.values) > 16:
		s.valueMap = make(map[desired.Endpoint]string, 2*len(s.values))
		for _, e := range s.values {
			s.valueMap[e.ep] = e.s
		}
	}
	return v
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
// frontends fe (the cluster IP, the external IPs and the node port), adding whatever
// chains and endpoint elements they lead to. A verdict no frontend uses
// is "".
func (s *svcContext) verdicts(fe frontends) (internal, external, nodePort string) {
	if s.sp.AffinitySeconds > 0 {
		return s.affinityVerdicts()
	}
	sp := s.sp
	r := s.clusterIPRoutes()
	internal = s.dispatchVerdict(sp.Dispatch(r[desired.FromOutside].Set), s.chain(s.c.internalChain, ipFrontend, s.c.masqRules(r)...),
		[]string{fe.cluster})
	switch {
	case s.ownsExternal(len(fe.external)):
		external = s.ownExternalVerdict()
	case len(fe.external) > 0:
		external = s.externalVerdict(ipFrontend, fe.external)
	}
	if sp.NodePort != 0 {
		nodePort = s.externalVerdict(nodePortFrontend, []string{fe.nodePort})
	}
	return internal, external, nodePort
}

// dispatchVerdict is "goto <dispatch chain>" for a non-empty dispatch
// (adding the chain, its map and the endpoint elements of every frontend
// key), else the empty verdict.
func (s *svcContext) dispatchVerdict(d desired.Dispatch, chain func(int) *chainSpec, frontends []string) string {
	if len(d.Endpoints) == 0 {
		return emptyVerdict(d.Empty)
	}
	ch := chain(len(d.Endpoints))
	s.p.addChain(ch)
	for _, k := range frontends {
		s.endpointElems(ch.epMap.name, k, d.Endpoints)
	}
	return ch.jump
}

// externalVerdict is the verdict of the external frontends of kind (keys):
// the dispatch chain every source class shares, or an entry chain that
// sends each to the cluster-wide or the local endpoints.
func (s *svcContext) externalVerdict(kind frontendKind, keys []string) string {
	sp, r := s.sp, s.routes[desired.ExternalPath]
	if uniform(r) {
		d := sp.Dispatch(r[desired.FromOutside].Set)
		return s.dispatchVerdict(d, s.chain(s.c.externalChain, kind, s.c.masqRules(r)...), keys)
	}
	verdicts := setVerdicts(r, func(set desired.Set) string {
		if set == desired.SetCluster {
			return s.dispatchVerdict(sp.Cluster, s.chain(s.c.clusterChain, kind), keys)
		}
		return s.dispatchVerdict(sp.Dispatch(set), s.chain(s.c.localChain, kind), keys)
	})
	name := "etp-local-"
	if kind == nodePortFrontend {
		name = "etp-local-nodeport-"
	}
	// In the service's shard, like the chains it leads to.
	ch := &chainSpec{name: shardName(name+emptyName(sp.External)+"-"+emptyName(sp.Cluster), s.shard),
		rules: s.c.entryRules(r, verdicts, []string{verdicts[r[desired.FromOutside].Set]})}
	s.p.addChain(ch)
	return "goto " + ch.name
}

// clusterIPRoutes are the cluster-IP routes, which must use one dispatch:
// the cluster IP has no entry chain.
func (s *svcContext) clusterIPRoutes() pathRoutes {
	r := s.routes[desired.ClusterIPPath]
	if !uniform(r) {
		s.c.fail(fmt.Errorf("cannot render the cluster-IP routes %+v of %s: one dispatch per source class", r, s.sp.Name))
	}
	return r
}

// chain binds a class of dispatch chains to a frontend kind, this
// service's shard and the masquerade rules pre.
func (s *svcContext) chain(class func(kind frontendKind, n, shard int, pre ...string) *chainSpec, kind frontendKind, pre ...string) func(int) *chainSpec {
	return func(n int) *chainSpec { return class(kind, n, s.shard, pre...) }
}

// endpointElems adds a frontend's slot group: its endpoints in slots
// 0…n-1 in the order of eps; assignSlots moves them to the slots the
// kernel has.
func (s *svcContext) endpointElems(m string, frontend string, eps []desired.Endpoint) {
	s.p.elems = append(s.p.elems, elemSpec{set: m, key: frontend, value: s.slotsOf(eps), slots: true})
}

// slotsOf is the slot group value of eps: each endpoint's address · port
// as data (appendEndpointData), in slots 0…n-1 (appendSlot). One string
// per endpoint list of the service port.
func (s *svcContext) slotsOf(eps []desired.Endpoint) string {
	for _, v := range s.slotValues {
		if len(v.eps) == len(eps) && &v.eps[0] == &eps[0] {
			return v.s
		}
	}
	b := s.buf[:0]
	for _, ep := range eps {
		at := len(b)
		b = appendEndpointData(append(b, 0), ep)
		b[at] = byte(len(b) - at - 1) // appendSlot's length byte
	}
	v := s.keep(b)
	s.slotValues = append(s.slotValues, epsString{eps, v})
	return v
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
	ci := s.clusterIPRoutes()
	internal = own("internal", s.c.masqRules(ci), sp.Dispatch(ci[desired.FromOutside].Set))
	r := s.routes[desired.ExternalPath]
	if uniform(r) {
		external = own("external", s.c.masqRules(r), sp.Dispatch(r[desired.FromOutside].Set))
	} else {
		verdicts := setVerdicts(r, func(set desired.Set) string {
			if set == desired.SetCluster {
				return own("cluster", nil, sp.Cluster)
			}
			return "" // the outside route's rules are inline
		})
		d := sp.Dispatch(r[desired.FromOutside].Set)
		ext := []string{emptyVerdict(d.Empty)}
		if len(d.Endpoints) > 0 {
			ext = s.c.affinityRules(s, d.Endpoints)
		}
		ch := &chainSpec{name: affinityChain("external", sp.Name), rules: s.c.entryRules(r, verdicts, ext)}
		s.p.addChain(ch)
		external = "goto " + ch.name
	}
	if sp.NodePort != 0 {
		nodePort = external
	}
	return internal, external, nodePort
}

// renderFirewall restricts LB IPs to AllowedSources: a guard set of
// filtered frontends and, in the allow set of the port's protocol, the
// pairs of frontend address · port and source prefix.
func (s *svcContext) renderFirewall() {
	if s.sp.AllowedSources == nil {
		return
	}
	// Only the API's protocols have an allow set (and a number: protoNumber).
	allowSet := firewallAllowSet(s.sp.Protocol)
	if !slices.Contains(firewallProtocols, s.sp.Protocol) {
		allowSet = ""
	}
	for _, lb := range s.sp.LoadBalancerIPs {
		if s.c.fs.family != specFor(familyOf(lb)).family {
			continue
		}
		frontend := s.frontendData(lb, s.sp.Port)
		s.p.addElem(setFirewallGuards, frontend, "")
		allow := allowFrontend(frontend)
		for _, src := range s.sp.AllowedSources {
			if allowSet != "" && specFor(familyOf(src.Addr())).family == s.c.fs.family {
				s.p.addElem(allowSet, s.keep(appendAllowKey(s.buf[:0], allow, src)), "")
			}
		}
	}
}

// renderHairpin lets an endpoint that reaches itself through the service be
// masqueraded (checked after DNAT, in masquerading).
// The three endpoint sets usually hold the same endpoints; each address is
// added once (a service's duplicate claims cost memory and claim time).
func (s *svcContext) renderHairpin() {
	var lists [3][]desired.Endpoint
	k, n := 0, 0
	for _, eps := range [...][]desired.Endpoint{s.sp.Internal.Endpoints, s.sp.External.Endpoints, s.sp.Cluster.Endpoints} {
		if !slices.ContainsFunc(lists[:k], func(l []desired.Endpoint) bool { return sameList(l, eps) }) {
			lists[k], k, n = eps, k+1, n+len(eps) // the dispatches usually share one list
		}
	}
	// A few endpoints are looked up among the part's hairpin elements (all
	// its elements from first on), many in a map.
	first := len(s.p.elems)
	var seen map[netip.Addr]bool
	if n > 16 {
		seen = make(map[netip.Addr]bool, n)
	}
	for _, eps := range lists[:k] {
		for _, ep := range eps {
			key := appendHairpinKey(s.buf[:0], ep.IP)
			s.buf = key
			if seen != nil && seen[ep.IP] || seen == nil && s.rendered(first, key) {
				continue
			}
			if seen != nil {
				seen[ep.IP] = true
			}
			s.p.addElem(hairpinSet(ep.IP), string(key), "")
		}
	}
}

// rendered reports whether one of the part's elements from first on has
// key.
func (s *svcContext) rendered(first int, key []byte) bool {
	for _, el := range s.p.elems[first:] {
		if el.key == string(key) {
			return true
		}
	}
	return false
}

// sameList reports whether a and b are the same list (not a copy).
func sameList(a, b []desired.Endpoint) bool {
	return len(a) == len(b) && (len(a) == 0 || &a[0] == &b[0])
}
