package iptables

import (
	"slices"

	"github.com/svcproxy/svcproxy/pkg/proxy/desired"
)

// policy is upstream's view of one service port, derived from the State's
// dispatches: which chains exist, where each kind of traffic goes, and
// what the filter table does when there is nowhere to go.
type policy struct {
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

// policyOf mirrors upstream's per-service decisions.
func policyOf(sp *desired.ServicePort, pn portNames) policy {
	p := policy{
		hasEndpoints:  len(sp.Cluster.Endpoints) > 0,
		internalLocal: sp.InternalLocal,
		externallyUp:  sp.NodePort != 0 || len(sp.ExternalIPs) > 0 || len(sp.LoadBalancerIPs) > 0,
		internalChain: pn.svc,
		externalChain: pn.svc,
	}
	p.hasInternal, p.hasExternal = p.hasEndpoints, p.hasEndpoints
	if p.internalLocal {
		p.internalChain, p.local = pn.svl, sp.Internal.Endpoints
		p.hasInternal = len(sp.Internal.Endpoints) > 0
	}
	if sp.ExternalLocal {
		p.externalChain, p.local = pn.svl, sp.External.Endpoints
		p.hasExternal = len(sp.External.Endpoints) > 0
	}
	p.usesSVC = p.hasEndpoints && (!p.internalLocal || p.externallyUp)
	p.usesSVL = len(p.local) > 0 && (p.internalLocal || (sp.ExternalLocal && p.externallyUp))
	p.usesEXT = p.hasEndpoints && p.externallyUp
	p.usesFW = p.hasEndpoints && len(sp.LoadBalancerIPs) > 0 && sp.AllowedSources != nil
	switch {
	case !p.hasEndpoints:
		p.internalTarget, p.internalComment = "REJECT", quoted(pn.display+" has no endpoints")
		p.externalTarget, p.externalComment = p.internalTarget, p.internalComment
	default:
		noLocal := quoted(pn.display + " has no local endpoints")
		if !p.hasInternal {
			p.internalTarget, p.internalComment = "DROP", noLocal
		}
		if !p.hasExternal {
			p.externalTarget, p.externalComment = "DROP", noLocal
		}
	}
	return p
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
