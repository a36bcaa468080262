package nftables

import (
	"strconv"
	"strings"

	"github.com/svcproxy/svcproxy/pkg/pipeline/desired"
)

// defaultOwnSlots decides when a service port's external and LB IP
// frontends get chains of their own instead of the shared dispatch
// chains: when, shared, they would hold at least this many endpoint slots
// beyond one frontend's.
//
// In the shared chains a frontend's endpoints are elements keyed by the
// frontend, so E external frontends with N endpoints cost E×N elements —
// 100k for 1,000 external IPs × 100 endpoints, rewritten when the count
// changes, on every node: a tenant could amplify. A chain of the service
// port's own picks among the N endpoints once (an inline map in its DNAT
// rule) and every frontend jumps there: E+N. But a chain and an inline
// map cost more than elements: at 5,000 service ports with 2 external
// IPs × 10 endpoints, own chains made a cold sync cost about four times
// the CPU (a chain costs what some 190 element operations do), and every
// nft run (a rule change) about ten times as long, as nft reads them all
// into its cache. So the shared chains stay for all but the
// amplifying shapes: (E−1)·N ≥ 256, e.g. 2 frontends × 256 endpoints,
// 27 × 10, 1,000 × 1. Crossing the line as endpoints come and go moves
// the frontends between the shapes, which costs what a count change
// costs in the shared chains anyway (all E×N elements move).
const defaultOwnSlots = 256

// ownsExternal reports whether the service port's ipFrontends external
// frontends use chains of their own (ownExternalVerdict).
func (s *svcContext) ownsExternal(ipFrontends int) bool {
	n := len(s.sp.External.Endpoints)
	if s.sp.ExternalLocal {
		n += len(s.sp.Cluster.Endpoints)
	}
	return ipFrontends >= 2 && (ipFrontends-1)*n >= s.c.ownSlots
}

// ownExternalVerdict is the verdict of the external and LB IP frontends
// of a service port with many (ownsExternal). The chains mirror
// the shared ones: "external-HASH-id" marks for masquerade and DNATs
// (eTP=Cluster); with eTP=Local it is the entry chain (pod and host
// traffic to "cluster-HASH-id", external clients to the local endpoints,
// inline). The node port, a single frontend, keeps the shared chains like
// every other service's: it costs N elements either way, and its path
// stays the one every node port takes.
func (s *svcContext) ownExternalVerdict() string {
	sp, r := s.sp, s.routes[desired.ExternalPath]
	if uniform(r) {
		return s.ownDispatch("external", sp.Dispatch(r[desired.FromOutside].Set), s.c.masqRules(r)...)
	}
	verdicts := setVerdicts(r, func(set desired.Set) string {
		if set == desired.SetCluster {
			return s.ownDispatch("cluster", sp.Cluster)
		}
		return "" // the outside route's DNAT is inline
	})
	d := sp.Dispatch(r[desired.FromOutside].Set)
	local := emptyVerdict(d.Empty)
	if len(d.Endpoints) > 0 {
		local = s.inlineDNAT(d.Endpoints)
	}
	ch := &chainSpec{name: ownChain("external", sp.Name), rules: s.c.entryRules(r, verdicts, []string{local})}
	s.p.addChain(ch)
	return "goto " + ch.name
}

// ownDispatch is "goto <class>-HASH-id", a chain of rules pre and a DNAT
// to d's endpoints, or d's empty verdict.
func (s *svcContext) ownDispatch(class string, d desired.Dispatch, pre ...string) string {
	if len(d.Endpoints) == 0 {
		return emptyVerdict(d.Empty)
	}
	ch := &chainSpec{name: ownChain(class, s.sp.Name), rules: append(pre, s.inlineDNAT(d.Endpoints))}
	s.p.addChain(ch)
	return "goto " + ch.name
}

// inlineDNAT is the rule that balances over eps with the endpoints in the
// rule itself: "dnat ip to numgen random mod N map { 0 : a . p, … }" (a
// plain "dnat ip to a:p" for one). An inline map, not a named one: the
// rule and its map are one kernel object, so an endpoint change is a
// rewrite of the chain (flush and add, one transaction), with none of a
// named numgen map's constraints (nft 1.0.6 can only add a rule reading
// one in the transaction that creates it), and a restart compares the
// rule's comment alone.
func (s *svcContext) inlineDNAT(eps []desired.Endpoint) string {
	var b strings.Builder
	b.WriteString("meta l4proto ")
	b.WriteString(s.proto)
	b.WriteString(" dnat ")
	b.WriteString(s.c.fs.ip)
	b.WriteString(" to ")
	if len(eps) == 1 {
		b.WriteString(endpointString(eps[0].AddrPort()))
		return b.String()
	}
	b.WriteString("numgen random mod ")
	b.WriteString(strconv.Itoa(len(eps)))
	b.WriteString(" map { ")
	for i, ep := range eps {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(strconv.Itoa(i))
		b.WriteString(" : ")
		b.WriteString(s.epValue(ep))
	}
	b.WriteString(" }")
	return b.String()
}
