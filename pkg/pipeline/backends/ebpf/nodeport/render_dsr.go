package nodeport

import (
	"net/netip"
	"slices"

	"github.com/svcproxy/svcproxy/pkg/pipeline/desired"
	"github.com/svcproxy/svcproxy/pkg/proxy"
)

// Direct server return (desired's DSR): a port's flows to an endpoint on
// a peer node leave this node tunnelled to that node, unchanged, and the
// peer delivers them to an endpoint of its own, which answers the client
// itself. The render writes both ends: what this node tunnels (the
// frontends' flagDSR, np_tunnels) and what it takes from its peers (the
// scope-1 frontends over DSR.In, np_peers).

// tunnelOf is np_tunnels' value as the store compares it: the endpoint's
// node, and flags (none yet). IPv4's map holds it as it is (tunnelVal);
// IPv6's holds the node alone (tunnelVal6), and reads back no flags.
type tunnelOf[A addrBytes] struct {
	Node  A
	Flags uint32
}

// tunnelRoute is a UDP DSR frontend (as clients send to it) and a node it
// tunnels flows to: a tunnel flow's entry in np_ct names both, and a sync
// that drops the route deletes those flows (deleteTunnelFlows).
type tunnelRoute[A addrBytes] struct {
	Frontend svcKeyOf[A]
	Node     A
}

// tunnelInGroup names the group of the flows a port's peers tunnel here,
// apart from its dispatches' groups.
const tunnelInGroup = "tunnel-in"

// renderDSR renders sp's direct server return into c, its frontends fs
// rendered already: flagDSR on its external and LB IPs, and on its node
// port at the node's own addresses (nodeIPs, its Node's, which its peers
// know it by and decapsulate for, as desired's Evaluate says; at other
// addresses the node port masquerades as without DSR); an
// np_tunnels entry per endpoint on a peer (an address listed with two
// nodes, which the State should not have, keeps the first); and the
// scope-1 frontends a decapsulated packet looks up, each external and LB
// IP and the node port at any address (a peer's, the wildcard), over a
// group of their own: DSR.In, this node's endpoints, balanced as the port
// is and with its affinity, but without source ranges (checked by the peer
// that took the flow) and dropping what finds no endpoint (the peer chose
// this node for an endpoint since gone).
func renderDSR[A addrBytes](c *contentsOf[A], sp *desired.ServicePort, fs frontendSet[A], nodeIPs []netip.Addr, taken map[uint64]bool) {
	family := familyOf[A]()
	addrs := slices.Concat(fs.external, fs.lbs)
	tunnelled := slices.Clone(addrs)
	for _, k := range fs.nodePorts {
		if slices.ContainsFunc(nodeIPs, func(ip netip.Addr) bool { return family.Contains(ip.Unmap()) && k.Addr == addrOf[A](ip) }) {
			tunnelled = append(tunnelled, k)
		}
	}
	for _, t := range sp.DSR.Tunnels {
		ep, node := t.Endpoint.Unmap(), t.Node.Unmap()
		if !family.Contains(ep) || !family.Contains(node) {
			continue
		}
		if _, ok := c.Tunnels[addrOf[A](ep)]; !ok {
			c.Tunnels[addrOf[A](ep)] = tunnelOf[A]{Node: addrOf[A](node)}
		}
		if sp.Protocol == proxy.UDP {
			for _, k := range tunnelled {
				c.tunnelRoutes[tunnelRoute[A]{Frontend: k, Node: addrOf[A](node)}] = struct{}{}
			}
		}
	}
	for _, k := range tunnelled {
		v := c.Services[k]
		v.Flags |= flagDSR
		c.Services[k] = v
	}
	in := sp.DSR.In
	in.Empty = desired.Drop
	v := dispatchGroup(c, sp, in, probe(groupIDOf(sp.Name, tunnelInGroup), taken))
	for _, k := range addrs {
		k.Scope = scopeTunnel
		c.Services[k] = v
	}
	if sp.NodePort != 0 {
		c.Services[svcKeyOf[A]{Port: netPort(sp.NodePort), Proto: protoNumbers[sp.Protocol], Scope: scopeTunnel}] = v
	}
}

// peers renders np_peers: the State's peers of A's family.
func peers[A addrBytes](c *contentsOf[A], addrs []netip.Addr) {
	family := familyOf[A]()
	for _, ip := range addrs {
		if ip = ip.Unmap(); family.Contains(ip) {
			c.Peers[addrOf[A](ip)] = 1
		}
	}
}
