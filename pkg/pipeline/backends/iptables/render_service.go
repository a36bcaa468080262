package iptables

import (
	"net/netip"
	"slices"
	"strconv"

	"github.com/svcproxy/svcproxy/pkg/pipeline/desired"
	"github.com/svcproxy/svcproxy/pkg/pipeline/reconcile"
)

// shared names the top-level chains every service port adds rules to.
type shared int

const (
	natServices shared = iota
	natNodePorts
	filterServices
	filterExternal
	filterNodePorts
	filterFirewall
	numShared
)

// entry is what the Proxier keeps per service port between syncs: its
// lines in the shared chains, which every sync that rewrites a shared
// chain writes again. Its own nat chains are its claims in the chain
// table (chains.go), rewritten only when the port changes.
type entry struct {
	shared     [numShared]lineBuffer
	chainRules int
}

// renderService renders one service port: its lines in the shared chains
// go to the entry, its own chains to out and their names to r.chains,
// each chain's declaration right
// before its rules and every chain after those it jumps to (SEP, then
// SVL/SVC, EXT, FW). Both tools refuse a jump to a chain not declared yet,
// and iptables-nft-restore looks up a rule's chain and target in hash
// buckets where the newest chain comes first: declared just before its
// rules, a chain is found at once, while ~120k chains declared up front
// (10k services) left each lookup walking hundreds of others.
func (r *renderer) renderService(sp *desired.ServicePort, out *lineBuffer) *entry {
	pn := namesOf(sp.Name)
	p := policyOf(sp, r.state.RoutesOf(sp), pn)
	e := &entry{}
	r.clusterIPRules(e, sp, pn, &p)
	r.externalRules(e, sp, pn, &p)
	r.nodePortRules(e, sp, pn, &p)

	before := out.lines
	seps := sepsOf(p.sepEndpoints(sp), pn)
	r.owner = ownerOf(pn)
	r.chains = slices.Grow(r.chains, len(seps.eps)+4) // SEPs, SVL, SVC, EXT, FW
	declare := func(chain string) {
		r.chains = append(r.chains, reconcile.Item[string, struct{}]{Key: chain})
		out.chainLine(chain)
	}
	for i, ep := range seps.eps {
		r.sepChain(out, sp, pn, ep, seps.spelled[i], declare)
	}
	if p.usesSVL {
		declare(pn.svl)
		r.internalMasq(out, sp, pn, &p, pn.svl)
		r.dispatch(out, sp, pn, pn.svl, p.local, &seps)
	}
	if p.usesSVC {
		declare(pn.svc)
		r.internalMasq(out, sp, pn, &p, pn.svc)
		r.dispatch(out, sp, pn, pn.svc, sp.Cluster.Endpoints, &seps)
	}
	if p.usesEXT {
		declare(pn.ext)
		r.extChain(out, pn, &p)
	}
	if p.usesFW {
		declare(pn.fw)
		r.fwChain(out, sp, pn)
	}
	e.chainRules = out.lines - before
	return e
}

func (r *renderer) clusterIPRules(e *entry, sp *desired.ServicePort, pn portNames, p *policy) {
	dst := w("-m", pn.proto, "-p", pn.proto, "-d", addr(sp.ClusterIP), "--dport", port(sp.Port))
	if p.hasInternal {
		e.shared[natServices].rule(chainServices, w("-m", "comment", "--comment", quoted(pn.display+" cluster IP")),
			dst, w("-j", p.internalChain))
		return
	}
	e.shared[filterServices].rule(chainServices, w("-m", "comment", "--comment", p.internalComment), dst,
		w("-j", p.internalTarget))
}

func (r *renderer) externalRules(e *entry, sp *desired.ServicePort, pn portNames, p *policy) {
	proto := w("-m", pn.proto, "-p", pn.proto)
	dport := w("--dport", port(sp.Port))
	for _, ip := range sp.ExternalIPs {
		if p.hasEndpoints {
			e.shared[natServices].rule(chainServices, w("-m", "comment", "--comment", quoted(pn.display+" external IP")),
				proto, w("-d", addr(ip)), dport, w("-j", pn.ext))
		}
		if !p.hasExternal {
			e.shared[filterExternal].rule(chainExternalServices, w("-m", "comment", "--comment", p.externalComment),
				proto, w("-d", addr(ip)), dport, w("-j", p.externalTarget))
		}
	}
	lbTarget := pn.ext
	if p.usesFW {
		lbTarget = pn.fw
	}
	for _, ip := range sp.LoadBalancerIPs {
		if p.hasEndpoints {
			e.shared[natServices].rule(chainServices, w("-m", "comment", "--comment", quoted(pn.display+" loadbalancer IP")),
				proto, w("-d", addr(ip)), dport, w("-j", lbTarget))
		}
		if p.usesFW {
			e.shared[filterFirewall].rule(chainProxyFirewall,
				w("-m", "comment", "--comment", quoted(pn.display+" traffic not accepted by "+pn.fw)),
				proto, w("-d", addr(ip)), dport, w("-j", "DROP"))
		}
	}
	if !p.hasExternal {
		for _, ip := range sp.LoadBalancerIPs {
			e.shared[filterExternal].rule(chainExternalServices, w("-m", "comment", "--comment", p.externalComment),
				proto, w("-d", addr(ip)), dport, w("-j", p.externalTarget))
		}
	}
}

func (r *renderer) nodePortRules(e *entry, sp *desired.ServicePort, pn portNames, p *policy) {
	proto := w("-m", pn.proto, "-p", pn.proto)
	if sp.NodePort != 0 {
		np := port(sp.NodePort)
		if p.hasEndpoints {
			if r.cfg.localhostV4 && r.cfg.counters.localhostNodePorts {
				e.shared[natNodePorts].rule(chainNodePorts, w("-m", "comment", "--comment", pn.display), proto,
					w("-d", "127.0.0.0/8", "--dport", np, "-m", "nfacct", "--nfacct-name", nfacctLocalhostNodePorts, "-j", pn.ext))
			}
			e.shared[natNodePorts].rule(chainNodePorts, w("-m", "comment", "--comment", pn.display), proto,
				w("--dport", np, "-j", pn.ext))
		}
		if !p.hasExternal {
			e.shared[filterExternal].rule(chainExternalServices, w("-m", "comment", "--comment", p.externalComment),
				w("-m", "addrtype", "--dst-type", "LOCAL"), proto, w("--dport", np, "-j", p.externalTarget))
		}
	}
	if sp.HealthCheckNodePort != 0 {
		e.shared[filterNodePorts].rule(chainNodePorts,
			w("-m", "comment", "--comment", quoted(pn.display+" health check node port")),
			w("-m", "tcp", "-p", "tcp", "--dport", port(sp.HealthCheckNodePort), "-j", "ACCEPT"))
	}
}

// internalMasq marks cluster-IP traffic for masquerade as its routes say:
// all of it when even pods' is masqueraded (masqueradeAll), else what the
// detector does not call a pod's. It writes the first rule of the internal
// dispatch chain, so it does nothing when chain is the other one.
func (r *renderer) internalMasq(out *lineBuffer, sp *desired.ServicePort, pn portNames, p *policy, chain string) {
	routes := p.routes[desired.ClusterIPPath]
	if !p.hasInternal || p.internalChain != chain {
		return
	}
	match := w("-m", "comment", "--comment", quoted(pn.display+" cluster IP"),
		"-m", pn.proto, "-p", pn.proto, "-d", addr(sp.ClusterIP), "--dport", port(sp.Port))
	switch {
	case routes[desired.FromPod].Masquerade:
		out.rule(p.internalChain, match, w("-j", chainMarkMasq))
	case routes[desired.FromOutside].Masquerade && r.cfg.ifNotLocal != nil:
		out.rule(p.internalChain, match, r.cfg.ifNotLocal, w("-j", chainMarkMasq))
	}
}

// extChain writes KUBE-EXT, the external path's routes: one masquerade
// rule when every source is treated alike (externalTrafficPolicy Cluster),
// else the pod and node short-cuts before the outside route.
func (r *renderer) extChain(out *lineBuffer, pn portNames, p *policy) {
	routes := p.routes[desired.ExternalPath]
	outside, pod, node := routes[desired.FromOutside], routes[desired.FromPod], routes[desired.FromNode]
	switch {
	case pod == outside && node == outside:
		if outside.Masquerade {
			out.rule(pn.ext, w("-m", "comment", "--comment", quoted("masquerade traffic for "+pn.display+" external destinations")),
				w("-j", chainMarkMasq))
		}
	default:
		if pod != outside && r.cfg.ifLocal != nil {
			out.rule(pn.ext, w("-m", "comment", "--comment", quoted("pod traffic for "+pn.display+" external destinations")),
				r.cfg.ifLocal, w("-j", p.chainOf(pod.Set, pn)))
		}
		if node != outside {
			if node.Masquerade {
				out.rule(pn.ext, w("-m", "comment", "--comment", quoted("masquerade LOCAL traffic for "+pn.display+" external destinations")),
					w("-m", "addrtype", "--src-type", "LOCAL", "-j", chainMarkMasq))
			}
			out.rule(pn.ext, w("-m", "comment", "--comment", quoted("route LOCAL traffic for "+pn.display+" external destinations")),
				w("-m", "addrtype", "--src-type", "LOCAL", "-j", p.chainOf(node.Set, pn)))
		}
	}
	if p.hasExternal {
		out.rule(pn.ext, w("-j", p.chainOf(outside.Set, pn)))
	}
}

func (r *renderer) fwChain(out *lineBuffer, sp *desired.ServicePort, pn portNames) {
	comment := w("-m", "comment", "--comment", quoted(pn.display+" loadbalancer IP"))
	for _, src := range sp.AllowedSources {
		out.rule(pn.fw, comment, w("-s", sourceString(src, sp.LoadBalancerIPs), "-j", pn.ext))
	}
	out.rule(pn.fw, w("-m", "comment", "--comment", quoted("other traffic to "+pn.display+" will be dropped by KUBE-PROXY-FIREWALL")))
}

// sourceString spells a source range as upstream does: an LB IP allowed
// for node-originated traffic is a bare address, a range keeps its length.
func sourceString(p netip.Prefix, lbIPs []netip.Addr) string {
	if p.IsSingleIP() && slices.Contains(lbIPs, p.Addr()) {
		return addr(p.Addr())
	}
	return p.String()
}

// sepSpelling is an endpoint as DNAT spells it, and its chain's name.
type sepSpelling struct{ endpoint, chain string }

// seps is a port's endpoint chains: the endpoints sorted by address and
// port, and how each is spelled. Both policy chains and the endpoint's
// own chain name an endpoint, and hashing its name once is a good part
// of a large sync's work.
type seps struct {
	eps     []desired.Endpoint
	spelled []sepSpelling
}

func sepsOf(eps []desired.Endpoint, pn portNames) seps {
	s := seps{eps: eps, spelled: make([]sepSpelling, len(eps))}
	for i, ep := range eps {
		e := endpointString(ep.AddrPort())
		s.spelled[i] = sepSpelling{endpoint: e, chain: pn.sepChain(e)}
	}
	return s
}

// of is how ep is spelled; a policy chain's endpoints are among them.
func (s *seps) of(ep desired.Endpoint, pn portNames) sepSpelling {
	i, ok := slices.BinarySearchFunc(s.eps, ep.AddrPort(), func(e desired.Endpoint, a netip.AddrPort) int { return e.AddrPort().Compare(a) })
	if !ok {
		e := endpointString(ep.AddrPort())
		return sepSpelling{endpoint: e, chain: pn.sepChain(e)}
	}
	return s.spelled[i]
}

// dispatch writes a policy chain: affinity checks first, then the
// probability ladder (rule i matches with 1/(n-i); the last always does).
func (r *renderer) dispatch(out *lineBuffer, sp *desired.ServicePort, pn portNames, chain string, eps []desired.Endpoint, seps *seps) {
	if sp.AffinitySeconds > 0 {
		secs := strconv.Itoa(int(sp.AffinitySeconds))
		for _, ep := range eps {
			s := seps.of(ep, pn)
			out.rule(chain, r.comment(pn.display+" -> "+s.endpoint, true),
				w("-m", "recent", "--name", s.chain, "--rcheck", "--seconds", secs, "--reap", "-j", s.chain))
		}
	}
	n := len(eps)
	for i, ep := range eps {
		s := seps.of(ep, pn)
		var stat []string
		if i < n-1 {
			stat = w("-m", "statistic", "--mode", "random", "--probability", r.probs.of(n-i))
		}
		out.rule(chain, r.comment(pn.display+" -> "+s.endpoint, true), stat, w("-j", s.chain))
	}
}

// sepChain declares and writes one endpoint's chain.
func (r *renderer) sepChain(out *lineBuffer, sp *desired.ServicePort, pn portNames, ep desired.Endpoint, s sepSpelling, declare func(string)) {
	declare(s.chain)
	comment := r.comment(pn.display, false)
	out.rule(s.chain, comment, w("-s", addr(ep.IP), "-j", chainMarkMasq))
	var recent []string
	if sp.AffinitySeconds > 0 {
		recent = w("-m", "recent", "--name", s.chain, "--set")
	}
	out.rule(s.chain, comment, recent, w("-m", pn.proto, "-p", pn.proto, "-j", "DNAT", "--to-destination", s.endpoint))
}

// comment is the per-endpoint comment, left out in large-cluster mode
// (it makes up about 40% of the restore input there).
func (r *renderer) comment(text string, quote bool) []string {
	if r.cfg.largeCluster {
		return nil
	}
	if quote {
		text = quoted(text)
	}
	return w("-m", "comment", "--comment", text)
}

func addr(a netip.Addr) string { return a.Unmap().String() }

func port(p uint16) string { return strconv.Itoa(int(p)) }
