package desired

import "net/netip"

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
}
