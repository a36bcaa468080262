package nodeport

import (
	"maps"
	"net/netip"
	"reflect"
	"testing"

	"github.com/svcproxy/svcproxy/pkg/pipeline/desired"
	"github.com/svcproxy/svcproxy/pkg/proxy"
)

var (
	peerIP  = netip.MustParseAddr("198.18.0.12")
	peer2IP = netip.MustParseAddr("198.18.0.13")
	dsrLB   = netip.MustParseAddr("198.18.200.1")
	dsrExt  = netip.MustParseAddr("198.18.100.1")
)

// dsrPort is a port with a node port, an external IP and an LB IP, whose
// External endpoints are epA (here) and epB (on peerIP), reached by
// tunnel.
func dsrPort(name string, proto proxy.Protocol, nodePort uint16) *desired.ServicePort {
	sp := port(name, proto, nodePort, epA, epB)
	sp.ExternalIPs, sp.LoadBalancerIPs = []netip.Addr{dsrExt}, []netip.Addr{dsrLB}
	sp.DSR = &desired.DSR{
		Tunnels: []desired.Tunnel{{Endpoint: epB.IP, Node: peerIP}},
		In:      desired.Dispatch{Endpoints: []proxy.Endpoint{epA}},
	}
	return sp
}

// dsrState is stateOf with a second node address, node ports on both,
// and peerIP as a peer.
func dsrState(sps ...*desired.ServicePort) *desired.State {
	st := stateOf(nodeIP, sps...)
	st.NodeIPs = []netip.Addr{nodeIP, netip.MustParseAddr("198.18.1.11")}
	st.Peers = []netip.Addr{peerIP}
	return st
}

// TestRenderDSRFlags: a DSR port's LB IP, external IP and node port at
// the node's addresses (both of its node IPs) carry flagDSR beside their
// usual flags; its node port at an address of the node that is not one of
// its node IPs does not (peers decapsulate for node IPs alone), nor does a
// port without DSR.
func TestRenderDSRFlags(t *testing.T) {
	sp := dsrPort("web", proxy.TCP, 30080)
	sp.AllowedSources = []netip.Prefix{netip.MustParsePrefix("198.18.0.0/16")}
	plain := port("plain", proxy.TCP, 30081, epA, epB)
	st := dsrState(sp, plain)
	second, hostOnly := st.NodeIPs[1], netip.MustParseAddr("198.18.2.11")
	st.NodePorts.Bound = []netip.Addr{nodeIP, second, hostOnly}
	c := Render(st)
	for k, want := range map[svcKey]uint32{
		frontendKey[[4]byte](dsrLB, 80, 6):       flagMasq | flagRanges | flagDSR,
		frontendKey[[4]byte](dsrExt, 80, 6):      flagMasq | flagDSR,
		frontendKey[[4]byte](nodeIP, 30080, 6):   flagMasq | flagDSR,
		frontendKey[[4]byte](second, 30080, 6):   flagMasq | flagDSR,
		frontendKey[[4]byte](hostOnly, 30080, 6): flagMasq,
		frontendKey[[4]byte](nodeIP, 30081, 6):   flagMasq,
		frontendKey[[4]byte](hostOnly, 30081, 6): flagMasq,
	} {
		if v, ok := c.Services[k]; !ok || v.Flags != want {
			t.Errorf("frontend %v: %+v (rendered %t), want flags %#x", k, v, ok, want)
		}
	}
	direct := c.Services[frontendKey[[4]byte](nodeIP, 30080, 6)]
	if direct.Count != 2 {
		t.Errorf("the DSR port's frontends count %d endpoints, want External's 2 (the pick chooses the node)", direct.Count)
	}
}

// TestRenderDSRTunnelScope: a DSR port's scope-1 frontends, its LB and
// external IPs and its node port at the wildcard address, share a group
// of their own over DSR.In (this node's endpoints), with the port's
// affinity and Maglev, and no ranges, masquerade or flagDSR; np_tunnels
// holds each endpoint on a peer with its node, np_peers the State's peers.
func TestRenderDSRTunnelScope(t *testing.T) {
	sp := dsrPort("web", proxy.UDP, 30080)
	sp.AllowedSources = []netip.Prefix{netip.MustParsePrefix("198.18.0.0/16")}
	sp.AffinitySeconds = 60
	sp.ExternalBalancing = proxy.BalanceMaglev
	c := Render(dsrState(sp))
	scoped := func(addr netip.Addr, port uint16) svcKey {
		k := frontendKey[[4]byte](addr, port, 17)
		k.Scope = scopeTunnel
		return k
	}
	wildcard := svcKey{Port: netPort(30080), Proto: 17, Scope: scopeTunnel}
	direct := c.Services[frontendKey[[4]byte](dsrLB, 80, 17)]
	in := c.Services[wildcard]
	for _, k := range []svcKey{scoped(dsrLB, 80), scoped(dsrExt, 80), wildcard} {
		v, ok := c.Services[k]
		if !ok || v != in {
			t.Errorf("scope-1 frontend %v: %+v (rendered %t), want the wildcard's %+v", k, v, ok, in)
		}
	}
	if in.ID == direct.ID || in.Count != 1 || in.Flags != flagMaglev || in.Affinity != 60 {
		t.Errorf("tunnelled-in group %+v, want a group of its own (not %#x) over 1 endpoint, Maglev alone, affinity 60", in, direct.ID)
	}
	if got := c.Backends[beKey{ID: in.ID}].AddrPort(); got != epA.AddrPort() {
		t.Errorf("tunnelled-in slot 0 is %v, want the local endpoint %v", got, epA.AddrPort())
	}
	if _, ok := c.Maglev[in.ID]; !ok || c.Members[memberOf[[4]byte](in.ID, epA)] != 1 || c.Members[memberOf[[4]byte](in.ID, epB)] != 0 {
		t.Errorf("tunnelled-in group: Maglev table %t, members %v; want a table and epA alone", ok, c.Members)
	}
	for k := range c.Services {
		if k.Scope == scopeTunnel && netipOf(k.Addr) == nodeIP {
			t.Errorf("a scope-1 frontend at the node's own address %v: the wildcard serves node ports", k)
		}
	}
	if want := map[[4]byte]tunnelOf[[4]byte]{epB.IP.As4(): {Node: peerIP.As4()}}; !maps.Equal(c.Tunnels, want) {
		t.Errorf("tunnels %v, want %v", c.Tunnels, want)
	}
	if want := map[[4]byte]peerVal{peerIP.As4(): 1}; !maps.Equal(c.Peers, want) {
		t.Errorf("peers %v, want %v", c.Peers, want)
	}
}

// TestRenderDSRNoLocalEndpoint: with no endpoint here, what a peer
// tunnels is dropped (the endpoint it chose is gone), not refused.
func TestRenderDSRNoLocalEndpoint(t *testing.T) {
	sp := dsrPort("web", proxy.TCP, 30080)
	sp.DSR.In = desired.Dispatch{}
	c := Render(dsrState(sp))
	in := c.Services[svcKey{Port: netPort(30080), Proto: 6, Scope: scopeTunnel}]
	if in.Count != 0 || in.Flags != flagDrop {
		t.Errorf("tunnelled-in record %+v, want no endpoint and flagDrop", in)
	}
}

// TestRenderDSRTunnelsFirstWins: an endpoint address listed on two nodes
// (an inconsistent State) keeps the first node, across ports in name
// order and within one; addresses of the other family are left out.
func TestRenderDSRTunnelsFirstWins(t *testing.T) {
	a := dsrPort("a", proxy.TCP, 30080)
	a.DSR.Tunnels = []desired.Tunnel{{Endpoint: epB.IP, Node: peerIP}, {Endpoint: epB.IP, Node: peer2IP},
		{Endpoint: netip.MustParseAddr("fd00::2"), Node: netip.MustParseAddr("fd00::12")}}
	b := dsrPort("b", proxy.TCP, 30081)
	b.DSR.Tunnels = []desired.Tunnel{{Endpoint: epB.IP, Node: peer2IP}}
	for range 3 {
		c := Render(dsrState(b, a))
		if want := map[[4]byte]tunnelOf[[4]byte]{epB.IP.As4(): {Node: peerIP.As4()}}; !maps.Equal(c.Tunnels, want) {
			t.Fatalf("tunnels %v, want %v (a's first)", c.Tunnels, want)
		}
	}
}

// TestRenderDSRStable: the same State renders the same contents, group
// IDs included; a State without DSR renders neither tunnels nor scope-1
// frontends, nor peers without any.
func TestRenderDSRStable(t *testing.T) {
	st := dsrState(dsrPort("a", proxy.TCP, 30080), dsrPort("b", proxy.UDP, 30081))
	x, y := Render(st), Render(st)
	if !reflect.DeepEqual(x, y) {
		t.Errorf("the same State rendered differently:\n%+v\n%+v", x, y)
	}
	plain := Render(stateOf(nodeIP, port("a", proxy.TCP, 30080, epA, epB)))
	if len(plain.Tunnels)+len(plain.Peers)+len(plain.tunnelRoutes) != 0 {
		t.Errorf("a State without DSR rendered tunnels %v, peers %v, routes %v", plain.Tunnels, plain.Peers, plain.tunnelRoutes)
	}
	for k := range plain.Services {
		if k.Scope != scopeDirect {
			t.Errorf("a State without DSR rendered the scope-1 frontend %v", k)
		}
	}
}

// TestRenderDSRRoutes: a UDP DSR port's tunnelled frontends each name
// every node they tunnel to, the flows a sync deletes when the route goes;
// TCP's flows need none.
func TestRenderDSRRoutes(t *testing.T) {
	udp := dsrPort("u", proxy.UDP, 30080)
	udp.DSR.Tunnels = append(udp.DSR.Tunnels, desired.Tunnel{Endpoint: netip.MustParseAddr("198.19.3.2"), Node: peer2IP})
	c := Render(dsrState(udp, dsrPort("t", proxy.TCP, 30081)))
	want := map[tunnelRoute[[4]byte]]struct{}{}
	for _, k := range []svcKey{frontendKey[[4]byte](dsrLB, 80, 17), frontendKey[[4]byte](dsrExt, 80, 17),
		frontendKey[[4]byte](nodeIP, 30080, 17), frontendKey[[4]byte](netip.MustParseAddr("198.18.1.11"), 30080, 17)} {
		for _, n := range []netip.Addr{peerIP, peer2IP} {
			want[tunnelRoute[[4]byte]{Frontend: k, Node: n.As4()}] = struct{}{}
		}
	}
	if !maps.Equal(c.tunnelRoutes, want) {
		t.Errorf("routes %v, want %v", c.tunnelRoutes, want)
	}
}

// TestRenderDSRIPv6: the same in an IPv6 State, 16-byte addresses, the
// wildcard node port at ::.
func TestRenderDSRIPv6(t *testing.T) {
	node6, peer6 := netip.MustParseAddr("fd00:18::11"), netip.MustParseAddr("fd00:18::12")
	local6, remote6 := ep(netip.MustParseAddr("fd00:19:1::2"), 8080), ep(netip.MustParseAddr("fd00:19:2::2"), 8080)
	sp := port("web", proxy.TCP, 30080, local6, remote6)
	sp.DSR = &desired.DSR{Tunnels: []desired.Tunnel{{Endpoint: remote6.IP, Node: peer6}},
		In: desired.Dispatch{Endpoints: []proxy.Endpoint{local6}}}
	st := stateOf(node6, sp)
	st.Family, st.Peers = proxy.IPv6, []netip.Addr{peer6}
	c := Render6(st)
	if v := c.Services[frontendKey[[16]byte](node6, 30080, 6)]; v.Flags&flagDSR == 0 {
		t.Errorf("node port at the node's address %+v, want flagDSR", v)
	}
	in, ok := c.Services[svcKeyOf[[16]byte]{Port: netPort(30080), Proto: 6, Scope: scopeTunnel}]
	if !ok || c.Backends[beKey{ID: in.ID}].AddrPort() != local6.AddrPort() {
		t.Errorf("wildcard scope-1 frontend %+v (rendered %t), want the local endpoint's group", in, ok)
	}
	if c.Tunnels[remote6.IP.As16()] != (tunnelOf[[16]byte]{Node: peer6.As16()}) || c.Peers[peer6.As16()] != 1 {
		t.Errorf("tunnels %v, peers %v", c.Tunnels, c.Peers)
	}
}
