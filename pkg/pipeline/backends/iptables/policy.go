package iptables

import (
	"slices"

	"github.com/svcproxy/svcproxy/pkg/pipeline/desired"
)

// policy is upstream's view of one service port: which chains exist and
// what each kind of traffic meets. Where traffic goes, who is masqueraded
// and REJECT vs DROP are desired's decisions (routes, Dispatch.Empty); this
// only maps them onto upstream's chains.
type policy struct {
	routes        desired.Routes
	hasEndpoints  bool // any usable endpoint anywhere
	internalLocal bool // internalTrafficPolicy Local
	externallyUp  bool // has a node port, external IP or LB IP

	internalChain string // SVC or SVL
	externalChain string // the policy chain EXT ends in: SVC or SVL
	usesSVC       bool
	usesSVL       bool
	usesEXT       bool
	usesFW        bool
	hasInternal   bool // cluster-IP traffic has endpoints
	hasExternal   bool // external traffic from outside has endpoints

	local []desired.Endpoint // the SVL chain's endpoints

	internalTarget, internalComment string // filter verdict without internal endpoints
	externalTarget, externalComment string // ... without external endpoints
}

// policyOf maps sp's routes onto upstream's chains: KUBE-SVL is the chain
// of a Local policy's dispatch, KUBE-SVC the cluster-wide one's.
func policyOf(sp *desired.ServicePort, routes desired.Routes, pn portNames) policy {
	p := policy{
		routes:        routes,
		hasEndpoints:  len(sp.Cluster.Endpoints) > 0,
		internalLocal: sp.InternalLocal,
		externallyUp:  sp.NodePort != 0 || len(sp.ExternalIPs) > 0 || len(sp.LoadBalancerIPs) > 0,
		internalChain: pn.svc,
		externalChain: pn.svc,
	}
	internal := sp.Dispatch(routes[desired.ClusterIPPath][desired.FromOutside].Set)
	external := sp.Dispatch(routes[desired.ExternalPath][desired.FromOutside].Set)
	p.hasInternal, p.hasExternal = len(internal.Endpoints) > 0, len(external.Endpoints) > 0
	if p.internalLocal {
		p.internalChain, p.local = pn.svl, sp.Internal.Endpoints
	}
	if sp.ExternalLocal {
		p.externalChain, p.local = pn.svl, sp.External.Endpoints
	}
	p.usesSVC = p.hasEndpoints && (!p.internalLocal || p.externallyUp)
	p.usesSVL = len(p.local) > 0 && (p.internalLocal || (sp.ExternalLocal && p.externallyUp))
	p.usesEXT = p.hasEndpoints && p.externallyUp
	p.usesFW = p.hasEndpoints && len(sp.LoadBalancerIPs) > 0 && sp.AllowedSources != nil
	p.internalTarget, p.internalComment = emptyTarget(internal.Empty, pn)
	p.externalTarget, p.externalComment = emptyTarget(external.Empty, pn)
	return p
}

// emptyTarget is the filter rule for a dispatch without endpoints, with
// upstream's comment: REJECT when the service has none anywhere, DROP when
// a Local policy leaves none on this node.
func emptyTarget(v desired.Verdict, pn portNames) (target, comment string) {
	if v == desired.Drop {
		return "DROP", quoted(pn.display + " has no local endpoints")
	}
	return "REJECT", quoted(pn.display + " has no endpoints")
}

// chainOf is the policy chain that serves a route's dispatch.
func (p *policy) chainOf(set desired.Set, pn portNames) string {
	switch set {
	case desired.SetInternal:
		return p.internalChain
	case desired.SetExternal:
		return p.externalChain
	}
	return pn.svc
}

// sepEndpoints lists the endpoints that get a KUBE-SEP chain: those of the
// policy chains in use, sorted, without duplicates.
func (p *policy) sepEndpoints(sp *desired.ServicePort) []desired.Endpoint {
	var out []desired.Endpoint
	if p.usesSVC {
		out = append(out, sp.Cluster.Endpoints...)
	}
	if p.usesSVL {
		out = append(out, p.local...)
	}
	slices.SortFunc(out, func(a, b desired.Endpoint) int { return a.AddrPort().Compare(b.AddrPort()) })
	return slices.Compact(out)
}
