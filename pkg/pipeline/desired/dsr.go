package desired

import (
	"maps"
	"net/netip"
	"slices"

	"github.com/svcproxy/svcproxy/pkg/pipeline/model"
	"github.com/svcproxy/svcproxy/pkg/proxy"
)

// Direct server return (DSR): external traffic to an
// externalTrafficPolicy: Cluster port whose endpoint is on a peer node is
// tunnelled to that node unchanged, and the peer delivers it to one of its
// own endpoints with the client's address and answers the client itself.
// desired decides which ports it applies to, which endpoints are reached
// by tunnel and where to; the backend renders that.

// Peer is another node that decapsulates DSR tunnels: it advertises so
// while its datapath can. IPs are its Node's status addresses, both
// families, primary first; never taken from the advertisement itself.
type Peer struct {
	Name string
	IPs  []netip.Addr
}

// DSR is one port's direct server return, in one family.
type DSR struct {
	// Tunnels are External's endpoints on peer nodes, with the address of
	// their node in this family, sorted by endpoint. External's other
	// endpoints are reached as without DSR.
	Tunnels []Tunnel
	// In serves the flows peers tunnel here: this node's endpoints of the
	// port (Empty is Drop: a peer sent it for an endpoint that is gone).
	In Dispatch
}

// Tunnel is an endpoint on a peer node and that node's address.
type Tunnel struct {
	Endpoint netip.Addr
	Node     netip.Addr
	// NodeName names the node, for explanations; the datapath needs only
	// its address.
	NodeName string
}

// dsrInputs are what a Compute decides every port's DSR from, besides the
// port itself.
type dsrInputs struct {
	// on is Options.DSR: without it no port gets a DSR.
	on bool
	// peers maps each peer's name to its first address of the family; a
	// peer without one is left out (nothing of the family can reach it).
	peers map[string]netip.Addr
}

func dsrInputsOf(opts Options, node Node, family proxy.IPFamily) dsrInputs {
	in := dsrInputs{on: opts.DSR}
	if !in.on {
		return in
	}
	for _, p := range node.Peers {
		if ips := nodeIPsOf(p.IPs, family); len(ips) > 0 && p.Name != "" && p.Name != node.Name {
			if in.peers == nil {
				in.peers = make(map[string]netip.Addr, len(node.Peers))
			}
			in.peers[p.Name] = ips[0]
		}
	}
	return in
}

// peerAddrsOf lists every address of family of the peers, sorted, without
// duplicates: the sources a tunnel may come from, and the node-port
// destinations of the flows it carries. Empty unless opts.DSR.
func peerAddrsOf(opts Options, node Node, family proxy.IPFamily) []netip.Addr {
	if !opts.DSR {
		return nil
	}
	var out []netip.Addr
	for _, p := range node.Peers {
		if p.Name != "" && p.Name != node.Name {
			out = append(out, nodeIPsOf(p.IPs, family)...)
		}
	}
	slices.SortFunc(out, netip.Addr.Compare)
	return slices.Compact(out)
}

// DSRApplies says whether a port gets a DSR on a node whose datapath
// tunnels (on) or not, and if not, why; "" when it applies. The port's own
// reasons come first, so that explain, which does not know on, finds the
// reason of a dsr port without a DSR with on false.
func DSRApplies(sp *ServicePort, on bool) string {
	switch {
	case sp.ExternalForwarding != proxy.ForwardDSR:
		return "forwarding is " + sp.ExternalForwarding.String()
	case sp.ExternalLocal:
		return "externalTrafficPolicy is Local: the client's address is kept already and nothing crosses nodes"
	case sp.Protocol != proxy.TCP && sp.Protocol != proxy.UDP:
		return "protocol " + string(sp.Protocol) + " is never tunnelled"
	case sp.NodePort == 0 && len(sp.ExternalIPs) == 0 && len(sp.LoadBalancerIPs) == 0:
		return "the port has no node port, external IP or load-balancer IP"
	case !on:
		return "this node does not tunnel: only ebpf mode with --bpf-dsr does"
	}
	return ""
}

// dsrOf decides out's DSR, once out's frontends and dispatches are set;
// nil when it does not apply. eps are the model's endpoints of the port,
// whose nodes tell which of External's endpoints are on peers; local is
// this node's set (categorize).
func dsrOf(out *ServicePort, eps model.EndpointList, local []Endpoint, in dsrInputs) *DSR {
	if DSRApplies(out, in.on) != "" {
		return nil
	}
	d := &DSR{Tunnels: tunnelsOf(eps, out.External.Endpoints, in.peers), In: Dispatch{Endpoints: local}}
	if len(local) == 0 {
		// A tunnelled flow without an endpoint here is dropped, not
		// refused: the peer that sent it answers for nothing of this node.
		d.In.Empty = Drop
	}
	return d
}

// tunnelsOf returns the endpoints of external (a subsequence of eps: both
// sorted by address, then port) whose node is a peer, with that peer's
// address, one per endpoint address.
func tunnelsOf(eps model.EndpointList, external []Endpoint, peers map[string]netip.Addr) []Tunnel {
	if len(peers) == 0 {
		return nil
	}
	var out []Tunnel
	addrs, infos := eps.Addrs(), eps.Infos()
	i := 0
	for _, e := range external {
		for i < len(addrs) && addrs[i] != e {
			i++
		}
		if i == len(addrs) {
			break
		}
		node, ok := peers[infos[i].NodeName]
		if !ok || (len(out) > 0 && out[len(out)-1].Endpoint == e.IP) {
			continue
		}
		out = append(out, Tunnel{Endpoint: e.IP, Node: node, NodeName: infos[i].NodeName})
	}
	return out
}

// dsrRebuild adds to rebuild the ports of prev whose DSR may change with
// the peers: all of them when the peers differ from prev's, none
// otherwise. rebuild is never modified; the result may be it.
func dsrRebuild(prev *State, node Node, on bool, rebuild map[proxy.ServicePortName]struct{}) map[proxy.ServicePortName]struct{} {
	if !on || slices.EqualFunc(prev.peers, node.Peers, Peer.equal) {
		return rebuild
	}
	out := maps.Clone(rebuild)
	if out == nil {
		out = map[proxy.ServicePortName]struct{}{}
	}
	for name, sp := range prev.Services.All() {
		if sp.DSR != nil {
			out[name] = struct{}{}
		}
	}
	return out
}

func (p Peer) equal(o Peer) bool { return p.Name == o.Name && slices.Equal(p.IPs, o.IPs) }

// TunnelOf returns the tunnel of endpoint address ip, if d tunnels it.
func (d *DSR) TunnelOf(ip netip.Addr) (Tunnel, bool) {
	if d == nil {
		return Tunnel{}, false
	}
	i, ok := slices.BinarySearchFunc(d.Tunnels, ip, func(t Tunnel, ip netip.Addr) int { return t.Endpoint.Compare(ip) })
	if !ok {
		return Tunnel{}, false
	}
	return d.Tunnels[i], true
}

// clusterSourcesOf is State.ClusterSources: node's ClusterSources and the
// masquerade's local CIDRs of family, masked, sorted, those inside
// another left out; prev's when it was made from the same
// Node.ClusterSources (prev has the same options and masquerade, or is
// nil). Empty unless opts.DSR.
func clusterSourcesOf(prev *State, opts Options, node Node, masq Masquerade, family proxy.IPFamily) []netip.Prefix {
	if !opts.DSR {
		return nil
	}
	if prev != nil && slices.Equal(prev.clusterSources, node.ClusterSources) {
		return prev.ClusterSources
	}
	var all []netip.Prefix
	for _, p := range slices.Concat(node.ClusterSources, masq.Local.CIDRs) {
		if p.IsValid() && family.Contains(p.Addr()) {
			all = append(all, p.Masked())
		}
	}
	slices.SortFunc(all, func(a, b netip.Prefix) int {
		if c := a.Addr().Compare(b.Addr()); c != 0 {
			return c
		}
		return a.Bits() - b.Bits()
	})
	out := all[:0]
	for _, p := range all {
		// Prefixes nest or are apart; sorted so, one inside another comes
		// after it, before any apart from it.
		if n := len(out); n > 0 && out[n-1].Contains(p.Addr()) {
			continue
		}
		out = append(out, p)
	}
	return out
}

// InCluster reports whether src is one of the State's ClusterSources.
func (s *State) InCluster(src netip.Addr) bool {
	return src.IsValid() && slices.ContainsFunc(s.ClusterSources, func(p netip.Prefix) bool { return p.Contains(src.Unmap()) })
}
