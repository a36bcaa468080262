package explain

import (
	"net/netip"
	"slices"

	"github.com/svcproxy/svcproxy/pkg/pipeline/desired"
	"github.com/svcproxy/svcproxy/pkg/pipeline/model"
	"github.com/svcproxy/svcproxy/pkg/proxy"
)

// Tunnel is an endpoint a packet reaches by direct server return: the
// packet goes unchanged to the endpoint's node, which delivers it with the
// client's address and answers the client itself.
type Tunnel struct {
	Endpoint netip.AddrPort
	Node     string
	NodeIP   netip.Addr
}

// forwarding words how external traffic reaches endpoints on other nodes:
// the port's forwarding, whether direct server return applies (and why
// not), and which endpoints this packet reaches by tunnel.
func (e *Explanation) forwarding(state *desired.State, out desired.Outcome) {
	sp := out.Port
	f := sp.ExternalForwarding
	if f == proxy.ForwardDefault {
		f = proxy.ForwardSNAT // an older daemon, which had no other
	}
	e.Forwarding = f.String()
	if f != proxy.ForwardDSR {
		return
	}
	if sp.DSR == nil {
		e.because("external forwarding is dsr (annotation %s, else --external-forwarding), but direct server return does not apply: %s; endpoints on other nodes are masqueraded",
			model.ExternalForwardingAnnotation, desired.DSRApplies(sp, false))
		return
	}
	for _, ep := range out.Tunneled {
		tn, _ := sp.DSR.TunnelOf(ep.IP)
		t := Tunnel{Endpoint: ep.AddrPort(), NodeIP: tn.Node, Node: tn.NodeName}
		e.Tunneled = append(e.Tunneled, t)
		e.because("%s: tunnelled to node %s (%s), client kept; that node delivers the packet to one of its own endpoints and answers the client directly",
			t.Endpoint, t.Node, t.NodeIP)
	}
	switch {
	case len(out.Tunneled) == 0 && out.Source != desired.FromOutside:
		e.because("direct server return applies to external traffic from outside the node only: this packet is not tunnelled")
	case len(out.Tunneled) == 0 && state.InCluster(e.Packet.Source):
		e.because("the source %s is inside the cluster (a Node's address or pod CIDR, or the cluster CIDR): its answer would not pass the tc programs that translate it back, so this packet is not tunnelled",
			e.Packet.Source)
	case len(out.Tunneled) == 0 && out.Frontend == desired.NodePortFrontend && !slices.Contains(state.NodeIPs, e.Packet.Dest):
		e.because("a node port is tunnelled only on the node IPs %v, the addresses peers know this node by: this packet is not tunnelled", state.NodeIPs)
	case len(out.Tunneled) == 0:
		e.because("direct server return applies, but no endpoint of this packet is on a node that decapsulates (a peer): none is tunnelled")
	case out.Masquerade:
		e.because("the other endpoints are not on a peer (or are the client itself): masqueraded")
	}
}
