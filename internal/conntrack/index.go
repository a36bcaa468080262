package conntrack

import (
	"net/netip"

	"github.com/svcproxy/svcproxy/pkg/kconntrack"
	"github.com/svcproxy/svcproxy/pkg/pipeline/desired"
	"github.com/svcproxy/svcproxy/pkg/proxy"
)

// frontendKey is a service address, port and protocol: the original
// destination of a flow to a cluster, external or load-balancer IP.
type frontendKey struct {
	proto uint8
	addr  netip.Addr
	port  uint16
}

// nodePortKey is a node port; its addresses are checked separately.
type nodePortKey struct {
	proto uint8
	port  uint16
}

// serving is the set of endpoints a frontend may legitimately be DNATed
// to; empty means every flow to the frontend is stale.
type serving map[netip.AddrPort]struct{}

// index answers "is this flow stale?" for one State. It covers UDP and
// SCTP flows; of TCP only attempts that never were translated (see
// untranslatedAttempt): a TCP peer notices a dead endpoint by itself, and
// deleting a live connection's entry breaks it.
type index struct {
	frontends map[frontendKey]serving
	// tcpServed are the frontends of TCP ports that have an endpoint.
	tcpServed map[frontendKey]bool
	nodePorts map[nodePortKey]serving
	// nodePortAll means node ports answer on every non-loopback address;
	// otherwise only on nodePortIPs.
	nodePortAll bool
	nodePortIPs map[netip.Addr]bool
	// sweep stands in for retired frontends the Reconciler no longer
	// knows: every UDP or SCTP flow to an address that is no current
	// frontend but was DNATed (its reply does not come from the address
	// it was sent to) counts as stale. That covers all a removed service
	// can have left behind. It also catches others' DNAT (a CNI hostPort,
	// Docker): a deleted UDP entry is made again, the same, by the next
	// packet; an SCTP association of theirs may have to restart. That is
	// the price of a bound on memory after a long conntrack outage.
	sweep bool
}

// connectionless reports whether flows of p can go stale silently.
func connectionless(p proxy.Protocol) bool { return p == proxy.UDP || p == proxy.SCTP }

// buildIndex indexes the UDP and SCTP frontends of st. retired are service
// ports that existed in earlier States but no longer do (or moved): flows
// to their old frontends are stale unless a current port took them over.
func buildIndex(st *desired.State, retired []*desired.ServicePort) *index {
	ix := &index{
		frontends:   map[frontendKey]serving{},
		tcpServed:   map[frontendKey]bool{},
		nodePorts:   map[nodePortKey]serving{},
		nodePortAll: st.NodePorts.All,
		nodePortIPs: map[netip.Addr]bool{},
	}
	for _, ip := range st.NodePorts.IPs {
		ix.nodePortIPs[ip] = true
	}
	for _, sp := range st.Services.All() {
		switch {
		case connectionless(sp.Protocol):
			ix.add(sp, servingOf(sp))
		case sp.Protocol == proxy.TCP && len(servingOf(sp)) > 0:
			frontendsOf(sp, func(k frontendKey) { ix.tcpServed[k] = true })
		}
	}
	for _, sp := range retired {
		if connectionless(sp.Protocol) {
			ix.addRetired(sp)
		}
	}
	return ix
}

// servingOf is the union of the port's dispatch endpoints: a flow DNATed
// to any of them is one the current rules could have made, so it stays.
func servingOf(sp *desired.ServicePort) serving {
	s := serving{}
	for _, d := range []desired.Dispatch{sp.Internal, sp.External, sp.Cluster} {
		for _, ep := range d.Endpoints {
			s[ep.AddrPort()] = struct{}{}
		}
	}
	return s
}

// frontendsOf calls fn for each service-address frontend of sp.
func frontendsOf(sp *desired.ServicePort, fn func(frontendKey)) {
	proto := kconntrack.ProtoNumber(sp.Protocol)
	fn(frontendKey{proto, sp.ClusterIP, sp.Port})
	for _, ip := range sp.ExternalIPs {
		fn(frontendKey{proto, ip, sp.Port})
	}
	for _, ip := range sp.LoadBalancerIPs {
		fn(frontendKey{proto, ip, sp.Port})
	}
}

func (ix *index) add(sp *desired.ServicePort, s serving) {
	frontendsOf(sp, func(k frontendKey) { ix.frontends[k] = merge(ix.frontends[k], s) })
	if sp.NodePort != 0 {
		k := nodePortKey{kconntrack.ProtoNumber(sp.Protocol), sp.NodePort}
		ix.nodePorts[k] = merge(ix.nodePorts[k], s)
	}
}

// addRetired marks the frontends of a port that is gone as serving
// nothing, without overriding a current port that uses the same frontend.
func (ix *index) addRetired(sp *desired.ServicePort) {
	frontendsOf(sp, func(k frontendKey) {
		if _, ok := ix.frontends[k]; !ok {
			ix.frontends[k] = serving{}
		}
	})
	if sp.NodePort != 0 {
		k := nodePortKey{kconntrack.ProtoNumber(sp.Protocol), sp.NodePort}
		if _, ok := ix.nodePorts[k]; !ok {
			ix.nodePorts[k] = serving{}
		}
	}
}

// merge unions b into a; two ports sharing a frontend (a conflict the API
// should prevent) keep each other's flows rather than delete them.
func merge(a, b serving) serving {
	if a == nil {
		return b
	}
	out := make(serving, len(a)+len(b))
	for _, s := range []serving{a, b} {
		for ep := range s {
			out[ep] = struct{}{}
		}
	}
	return out
}

// lookup finds the serving set for a flow's original destination; known is
// false when the flow is not to a UDP or SCTP frontend of the index.
func (ix *index) lookup(f kconntrack.Flow) (s serving, known bool) {
	dst := f.Orig.Dst
	if s, ok := ix.frontends[frontendKey{f.Proto, dst.Addr(), dst.Port()}]; ok {
		return s, true
	}
	s, ok := ix.nodePorts[nodePortKey{f.Proto, dst.Port()}]
	if !ok {
		return nil, false
	}
	if ix.nodePortAll {
		return s, !dst.Addr().IsLoopback()
	}
	return s, ix.nodePortIPs[dst.Addr()]
}

// stale reports whether f goes to a frontend of the index and its reply
// does not come from an endpoint that frontend serves. That covers flows
// DNATed to a removed endpoint and flows that never were DNATed (made
// while the service rejected, or before its rules existed: their reply
// source is the frontend itself).
func (ix *index) stale(f kconntrack.Flow) bool {
	switch f.Proto {
	case kconntrack.ProtoTCP:
		return ix.untranslatedAttempt(f)
	case kconntrack.ProtoUDP, kconntrack.ProtoSCTP:
	default:
		return false
	}
	s, known := ix.lookup(f)
	if !known {
		return ix.sweep && f.Reply.Src != f.Orig.Dst
	}
	_, ok := s[f.Reply.Src]
	return !ok
}

// untranslatedAttempt reports a TCP connection attempt to a served
// frontend that no rule translated and nothing answered: a SYN sent while
// the node had no rules for it (before the proxy's first sync, after a
// flush or a cleanup) leaves such an entry for the kernel's SYN_SENT
// timeout (two minutes). A client that reuses that source port meanwhile
// matches the entry, is not translated either, and times out, however
// the rules look now. With rules in place a SYN to the frontend is always
// translated (or rejected before it is confirmed), so such an entry
// belongs to no live connection; node ports are left alone, as a SYN to
// the node's own address is answered (reset) by the node itself.
func (ix *index) untranslatedAttempt(f kconntrack.Flow) bool {
	dst := f.Orig.Dst
	return !f.Replied && f.Reply.Src == dst && ix.tcpServed[frontendKey{f.Proto, dst.Addr(), dst.Port()}]
}

// valid reports whether ix positively knows f to be a good flow; used to
// spare flows a newer State made valid while the older one was deciding.
func (ix *index) valid(f kconntrack.Flow) bool {
	s, known := ix.lookup(f)
	if !known {
		return false
	}
	_, ok := s[f.Reply.Src]
	return ok
}
