package desired

import (
	"net/netip"
	"slices"

	"github.com/svcproxy/svcproxy/pkg/pipeline/model"
	"github.com/svcproxy/svcproxy/pkg/proxy"
)

// buildServicePort decides everything about one service port in one family.
// It returns nil when the port has no cluster IP of the family: a per-family
// proxier ignores such a port entirely, like upstream.
func buildServicePort(sp *model.ServicePort, eps model.EndpointList, in portInputs, lost []LostFrontend) *ServicePort {
	family := in.family
	clusterIP, ok := firstOfFamily(sp.ClusterIPs, family)
	if !ok {
		return nil
	}
	out := &ServicePort{
		Name:                sp.Name,
		Protocol:            sp.Name.Protocol,
		Port:                sp.Port,
		ClusterIP:           clusterIP,
		NodePort:            sp.NodePort,
		ExternalIPs:         addrsOfFamily(sp.ExternalIPs, family),
		LoadBalancerIPs:     addrsOfFamily(sp.LoadBalancerIPs, family),
		AffinitySeconds:     sp.AffinitySeconds,
		InternalLocal:       sp.InternalLocal,
		ExternalLocal:       sp.ExternalLocal,
		HealthCheckNodePort: sp.HealthCheckNodePort,
		Setting:             portSetting(in.settings, sp.Extensions),
		ExternalBalancing:   sp.ExternalBalancing,
		ExternalForwarding:  sp.ExternalForwarding,
	}
	if out.ExternalBalancing == proxy.BalanceDefault {
		out.ExternalBalancing = in.balancing
	}
	if out.ExternalForwarding == proxy.ForwardDefault {
		out.ExternalForwarding = in.forwarding
	}
	if len(lost) > 0 {
		withoutLost(out, lost)
	}
	out.AllowedSources = allowedSources(sp, out.LoadBalancerIPs, family, in.nodeIPs)
	out.Routes = sharedRoutes(in.masq, sp.ExternalLocal)

	sets := categorize(eps, family, in.node)
	out.Cluster = dispatch(sets.cluster, sets.cluster)
	out.Internal = out.Cluster
	if sp.InternalLocal {
		out.Internal = dispatch(sets.local, sets.cluster)
	}
	out.External = out.Cluster
	if sp.ExternalLocal {
		out.External = dispatch(sets.local, sets.cluster)
	}
	out.DSR = dsrOf(out, eps, sets.local, in.dsr)
	return out
}

// dispatch builds a Dispatch over chosen. With nothing chosen, traffic is
// rejected when the service has no usable endpoint anywhere (cluster empty),
// which tells clients at once; otherwise a Local policy left nothing on this
// node and traffic is dropped, as upstream does, so that load balancers'
// health checks rather than refused connections steer clients away.
func dispatch(chosen, cluster []Endpoint) Dispatch {
	d := Dispatch{Endpoints: chosen}
	if len(chosen) == 0 && len(cluster) > 0 {
		d.Empty = Drop
	}
	return d
}

// allowedSources returns the loadBalancerSourceRanges firewall for the LB
// IPs, or nil when there is none. When a node IP is inside a range, the LB
// IPs themselves are allowed as sources too: traffic the node sends to its
// own LB IP may leave with the LB IP as source address, and upstream lets it
// through. A range of length 0 allows everyone: no firewall, as upstream.
// When ranges were asked for but none of this family parsed (invalid), the
// firewall is empty but present: it drops everything (fail closed), never
// opening the LB IPs to the world because of a typo.
//
// The result is normalized (see coverPrefixes): interval sets refuse
// overlapping elements, so nested or duplicate ranges must never reach a
// backend.
func allowedSources(sp *model.ServicePort, lbIPs []netip.Addr, family proxy.IPFamily, nodeIPs []netip.Addr) []netip.Prefix {
	if len(lbIPs) == 0 {
		return nil
	}
	var out []netip.Prefix
	nodeInRange := false
	for _, r := range sp.SourceRanges {
		if !family.Contains(r.Addr()) {
			continue
		}
		if r.Bits() == 0 {
			return nil
		}
		out = append(out, r.Masked())
		for _, ip := range nodeIPs {
			nodeInRange = nodeInRange || r.Contains(ip)
		}
	}
	if len(out) == 0 {
		if sp.SourceRangesInvalid {
			return []netip.Prefix{}
		}
		return nil
	}
	if nodeInRange {
		for _, ip := range lbIPs {
			out = append(out, netip.PrefixFrom(ip, ip.BitLen()))
		}
	}
	return coverPrefixes(out)
}

// coverPrefixes returns the prefixes of ps that no other prefix of ps
// contains, sorted and without duplicates: the same set of addresses with
// no two prefixes overlapping (two CIDRs either nest or are disjoint).
func coverPrefixes(ps []netip.Prefix) []netip.Prefix {
	// Sorted by address then length, a prefix that contains others comes
	// right before them.
	slices.SortFunc(ps, comparePrefixes)
	out := ps[:0]
	for _, p := range ps {
		if n := len(out); n > 0 && out[n-1].Bits() <= p.Bits() && out[n-1].Contains(p.Addr()) {
			continue
		}
		out = append(out, p)
	}
	return out
}

func comparePrefixes(a, b netip.Prefix) int {
	if c := a.Addr().Compare(b.Addr()); c != 0 {
		return c
	}
	return a.Bits() - b.Bits()
}

func firstOfFamily(addrs []netip.Addr, family proxy.IPFamily) (netip.Addr, bool) {
	for _, a := range addrs {
		if family.Contains(a) {
			return a.Unmap(), true
		}
	}
	return netip.Addr{}, false
}

// addrsOfFamily returns the addresses of family, sorted and deduplicated,
// or nil when there are none.
func addrsOfFamily(addrs []netip.Addr, family proxy.IPFamily) []netip.Addr {
	var out []netip.Addr
	for _, a := range addrs {
		if family.Contains(a) {
			out = append(out, a.Unmap())
		}
	}
	slices.SortFunc(out, netip.Addr.Compare)
	return slices.Compact(out)
}
