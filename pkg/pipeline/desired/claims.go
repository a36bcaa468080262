package desired

import (
	"net/netip"
	"slices"

	"github.com/svcproxy/svcproxy/pkg/pipeline/model"
	"github.com/svcproxy/svcproxy/pkg/proxy"
)

// FrontendKind is the field a service port claims a frontend address with.
// Lower kinds win a contested frontend.
type FrontendKind uint8

// Frontend kinds, in claim rank: a cluster IP is allocated by the API
// server and never yields; a load-balancer IP is set by a controller; an
// external IP is whatever a tenant wrote (CVE-2020-8554), so it yields to
// both.
const (
	ClaimClusterIP FrontendKind = iota
	ClaimLoadBalancerIP
	ClaimExternalIP
)

// String names the kind as the Service field it comes from.
func (k FrontendKind) String() string {
	switch k {
	case ClaimClusterIP:
		return "clusterIP"
	case ClaimLoadBalancerIP:
		return "loadBalancerIP"
	}
	return "externalIP"
}

// LostFrontend is a frontend a service port claimed but does not get.
// Either the same address, protocol and port is claimed with a higher rank
// (or the same rank by an older Service, or, as old, by one whose name
// sorts first), and one frontend can lead to one place only: without this
// rule the claim that happened to be rendered last took the traffic, and a
// tenant's externalIP equal to another Service's cluster IP hijacked it.
// Or the address is refused outright (Refused, Winner zero).
type LostFrontend struct {
	Addr    netip.Addr
	Kind    FrontendKind
	Winner  proxy.ServicePortName
	Refused Refusal
}

// Refusal says why a frontend is refused whoever else claims it.
type Refusal uint8

// The refusals.
const (
	// NotRefused: the frontend went to Winner's higher claim.
	NotRefused Refusal = iota
	// RefusedNodeAddress: the address is one of this node's own (a Node
	// address). Traffic to it is the node's: a Service holding it took,
	// on its port, another Service's node port or the kubelet's.
	RefusedNodeAddress
)

type frontendKey struct {
	addr  netip.Addr
	proto proxy.Protocol
	port  uint16
}

type claim struct {
	name proxy.ServicePortName
	kind FrontendKind
	// created is the Service's creationTimestamp (Unix seconds).
	created int64
}

// beats ranks claims: by kind, then the older Service, then by name. Age
// before name: the API server sets creationTimestamp, while a name is
// whatever a tenant writes, so a new Service cannot take a frontend from
// one that holds it by sorting first. Every node ranks alike.
func (c claim) beats(o claim) bool {
	if c.kind != o.kind {
		return c.kind < o.kind
	}
	if c.created != o.created {
		return c.created < o.created
	}
	return c.name.Compare(o.name) < 0
}

// lostFrontends returns, per service port, the frontends of family it
// loses, sorted by address and kind. Which claim wins may change with any
// Service, so it reads every claim of the snapshot; but only external and
// LB claims can be contested (the API server hands out cluster IPs
// uniquely), so cluster IPs are only looked up among those, and a
// snapshot without external or LB IPs costs one pass without allocating.
// External and LB claims on node addresses are refused before any contest.
func lostFrontends(snap *model.Snapshot, family proxy.IPFamily, nodes nodeAddrs) (map[proxy.ServicePortName][]LostFrontend, map[frontendKey]claim) {
	c := &contest{winners: map[frontendKey]claim{}, nodes: nodes}
	for name, sp := range snap.Services.All() {
		if len(sp.ExternalIPs) == 0 && len(sp.LoadBalancerIPs) == 0 {
			continue
		}
		if _, ok := firstOfFamily(sp.ClusterIPs, family); !ok {
			continue // not this family's: no frontends here
		}
		c.addAll(name, sp, sp.LoadBalancerIPs, ClaimLoadBalancerIP, family)
		c.addAll(name, sp, sp.ExternalIPs, ClaimExternalIP, family)
	}
	if len(c.winners) == 0 {
		return c.lost(), nil
	}
	for name, sp := range snap.Services.All() {
		if ip, ok := firstOfFamily(sp.ClusterIPs, family); ok {
			if k := (frontendKey{ip, name.Protocol, sp.Port}); c.contested(k) {
				c.add(k, claim{name, ClaimClusterIP, sp.Created})
			}
		}
	}
	return c.lost(), c.winners
}

// claimsUnchanged reports whether the changed ports can change no contest
// decided in prev: each of them either claims what it claimed when prev
// was decided (an endpoint change of a LoadBalancer Service), or neither
// claims (nor claimed) an external or LB frontend nor lost one, nor has a
// cluster IP on a claimed frontend. Then prev's result holds, and the
// change costs no pass over every Service.
func claimsUnchanged(prev *State, snap *model.Snapshot, changed map[proxy.ServicePortName]struct{}, family proxy.IPFamily) bool {
	for name := range changed {
		old, _ := prev.claimedFrom.Get(name)
		cur, _ := snap.Services.Get(name)
		if sameClaims(old, cur) {
			continue
		}
		if len(prev.Lost[name]) > 0 {
			return false
		}
		if old, _ := prev.Services.Get(name); old != nil {
			if len(old.ExternalIPs) > 0 || len(old.LoadBalancerIPs) > 0 || prev.claimed(frontendKey{old.ClusterIP, name.Protocol, old.Port}) {
				return false
			}
		}
		if sp, ok := snap.Services.Get(name); ok {
			if len(sp.ExternalIPs) > 0 || len(sp.LoadBalancerIPs) > 0 {
				return false
			}
			if ip, ok := firstOfFamily(sp.ClusterIPs, family); ok && prev.claimed(frontendKey{ip, name.Protocol, sp.Port}) {
				return false
			}
		}
	}
	return true
}

func (st *State) claimed(k frontendKey) bool { _, ok := st.claims[k]; return ok }

// sameClaims reports whether two versions of a service port claim the same
// frontends with the same rank: everything lostFrontends reads of a port
// besides its name. Two absent versions claim nothing either way.
func sameClaims(a, b *model.ServicePort) bool {
	if a == b {
		return true
	}
	return a != nil && b != nil && a.Port == b.Port && a.Created == b.Created &&
		slices.Equal(a.ClusterIPs, b.ClusterIPs) && slices.Equal(a.ExternalIPs, b.ExternalIPs) &&
		slices.Equal(a.LoadBalancerIPs, b.LoadBalancerIPs)
}

// contest collects the claims on frontends and who wins each.
type contest struct {
	winners map[frontendKey]claim
	losses  []loss
	nodes   nodeAddrs
}

// nodeAddrs are refused as external and LB frontends. Only Nodes'
// addresses, not every address on the host's interfaces: a VIP that
// keepalived or kube-vip moves between nodes sits on an interface of the
// node holding it, and is exactly what externalIPs and LB IPs are for.
type nodeAddrs struct {
	// own are this node's IPs of the family.
	own []netip.Addr
	// cluster are every Node's (Node.ClusterNodeIPs), sorted: a frontend
	// is looked up among thousands of them.
	cluster []netip.Addr
}

func (n nodeAddrs) holds(a netip.Addr) bool {
	if slices.Contains(n.own, a) {
		return true
	}
	_, found := slices.BinarySearchFunc(n.cluster, a, netip.Addr.Compare)
	return found
}

type loss struct {
	key     frontendKey
	claim   claim
	refused Refusal
}

func (c *contest) contested(k frontendKey) bool { _, ok := c.winners[k]; return ok }

// addAll claims a frontend per address of family in addrs, or records
// its refusal.
func (c *contest) addAll(name proxy.ServicePortName, sp *model.ServicePort, addrs []netip.Addr, kind FrontendKind, family proxy.IPFamily) {
	for _, a := range addrs {
		if !family.Contains(a) {
			continue
		}
		k, cl := frontendKey{a.Unmap(), name.Protocol, sp.Port}, claim{name, kind, sp.Created}
		if c.nodes.holds(k.addr) {
			c.losses = append(c.losses, loss{k, cl, RefusedNodeAddress})
			continue
		}
		c.add(k, cl)
	}
}

func (c *contest) add(k frontendKey, cl claim) {
	w, ok := c.winners[k]
	switch {
	case !ok:
		c.winners[k] = cl
	case cl.beats(w):
		c.winners[k] = cl
		c.losses = append(c.losses, loss{k, w, NotRefused})
	case cl != w:
		c.losses = append(c.losses, loss{k, cl, NotRefused})
	}
}

// lost returns the losses per service port, each naming the final winner.
func (c *contest) lost() map[proxy.ServicePortName][]LostFrontend {
	if len(c.losses) == 0 {
		return nil
	}
	out := map[proxy.ServicePortName][]LostFrontend{}
	for _, l := range c.losses {
		lf := LostFrontend{Addr: l.key.addr, Kind: l.claim.kind, Refused: l.refused}
		if l.refused == NotRefused {
			lf.Winner = c.winners[l.key].name
		}
		if !slices.Contains(out[l.claim.name], lf) {
			out[l.claim.name] = append(out[l.claim.name], lf)
		}
	}
	for _, lfs := range out {
		slices.SortFunc(lfs, func(a, b LostFrontend) int {
			if c := a.Addr.Compare(b.Addr); c != 0 {
				return c
			}
			return int(a.Kind) - int(b.Kind)
		})
	}
	return out
}

// withoutLost removes the frontends sp lost from its lists. The cluster IP
// never loses (the API server allocates it uniquely; if two Services had
// one anyway, both keep it and the backend sees the conflict).
func withoutLost(sp *ServicePort, lost []LostFrontend) {
	drop := func(addrs []netip.Addr, kind FrontendKind) []netip.Addr {
		return slices.DeleteFunc(addrs, func(a netip.Addr) bool {
			return slices.ContainsFunc(lost, func(l LostFrontend) bool { return l.Addr == a && l.Kind == kind })
		})
	}
	sp.ExternalIPs = drop(sp.ExternalIPs, ClaimExternalIP)
	sp.LoadBalancerIPs = drop(sp.LoadBalancerIPs, ClaimLoadBalancerIP)
}

// lossesChanged adds to rebuild every service port whose lost frontends
// differ between two resolutions.
func lossesChanged(prev, cur map[proxy.ServicePortName][]LostFrontend, rebuild map[proxy.ServicePortName]struct{}) {
	for name, l := range cur {
		if !slices.Equal(prev[name], l) {
			rebuild[name] = struct{}{}
		}
	}
	for name := range prev {
		if _, ok := cur[name]; !ok {
			rebuild[name] = struct{}{}
		}
	}
}
