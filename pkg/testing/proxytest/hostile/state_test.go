package hostile

import (
	"fmt"
	"net/netip"
	"slices"

	"github.com/svcproxy/svcproxy/pkg/pipeline/desired"
	"github.com/svcproxy/svcproxy/pkg/proxy"
)

// checkAddr fails unless a is a plain address of family: valid, unmapped,
// without a zone (what every backend spells verbatim).
func checkAddr(family proxy.IPFamily, a netip.Addr) error {
	switch {
	case !a.IsValid():
		return fmt.Errorf("invalid address")
	case a.Zone() != "":
		return fmt.Errorf("%s has a zone", a)
	case a.Is4In6():
		return fmt.Errorf("%s is IPv4-mapped", a)
	case !family.Contains(a):
		return fmt.Errorf("%s is not %s", a, family)
	}
	return nil
}

// checkState checks what every backend relies on: addresses of the
// State's family in plain form, normalized AllowedSources, no frontend
// (address·protocol·port, or node port·protocol) leading to two places,
// no external or LB IP on a node address, this node's or, in
// clusterNodeIPs, any Node's (it would take that node's own traffic:
// another Service's node port, the kubelet), and no endpoint address that
// can be nobody's endpoint (loopback, multicast, …).
func checkState(t reporter, st *desired.State, clusterNodeIPs []netip.Addr) {
	t.Helper()
	type frontend struct {
		addr  netip.Addr
		proto proxy.Protocol
		port  uint16
	}
	owner := map[frontend]proxy.ServicePortName{}
	claim := func(name proxy.ServicePortName, fe frontend, what string) {
		if prev, ok := owner[fe]; ok && prev != name {
			t.Errorf("%s: %s frontend %s %s:%d claimed by %s and %s", st.Family, what, fe.proto, fe.addr, fe.port, prev, name)
		}
		owner[fe] = name
	}
	for name, sp := range st.Services.All() {
		addrs := append([]netip.Addr{sp.ClusterIP}, sp.ExternalIPs...)
		addrs = append(addrs, sp.LoadBalancerIPs...)
		for _, d := range []desired.Dispatch{sp.Internal, sp.External, sp.Cluster} {
			for _, ep := range d.Endpoints {
				addrs = append(addrs, ep.IP)
				if unusableEndpoint(ep.IP) {
					t.Errorf("%s: %s: endpoint %s can be nobody's endpoint", st.Family, name, ep.IP)
				}
			}
		}
		for _, a := range addrs {
			if err := checkAddr(st.Family, a); err != nil {
				t.Errorf("%s: %s: %v", st.Family, name, err)
			}
		}
		claim(name, frontend{sp.ClusterIP, sp.Protocol, sp.Port}, "cluster IP")
		for _, a := range append(slices.Clone(sp.ExternalIPs), sp.LoadBalancerIPs...) {
			claim(name, frontend{a, sp.Protocol, sp.Port}, "external/LB")
			if slices.Contains(st.NodeIPs, a) || slices.Contains(clusterNodeIPs, a) {
				t.Errorf("%s: %s: external/LB frontend %s is a node address", st.Family, name, a)
			}
		}
		if sp.NodePort != 0 {
			claim(name, frontend{netip.Addr{}, sp.Protocol, sp.NodePort}, "node port")
		}
		checkAllowed(t, st.Family, name, sp.AllowedSources)
	}
}

// unusableEndpoint: an address no packet can be DNATed to and delivered
// by, or one that reaches the node itself.
func unusableEndpoint(a netip.Addr) bool {
	return a.IsUnspecified() || a.IsLoopback() || a.IsMulticast() || a.IsLinkLocalUnicast() ||
		a == netip.AddrFrom4([4]byte{255, 255, 255, 255})
}

// checkLostAsFull: the refusals and contests an incremental Compute
// decided are a full Compute's.
func checkLostAsFull(t reporter, st, full *desired.State) {
	t.Helper()
	if len(st.Lost) != len(full.Lost) {
		t.Errorf("%s: %d ports lost frontends, a full Compute says %d: %v, want %v", st.Family, len(st.Lost), len(full.Lost), st.Lost, full.Lost)
		return
	}
	for name, lost := range full.Lost {
		if !slices.Equal(st.Lost[name], lost) {
			t.Errorf("%s: %s lost %v, a full Compute says %v", st.Family, name, st.Lost[name], lost)
		}
	}
}

// checkAllowed: sorted, masked, of the family, no prefix inside another.
func checkAllowed(t reporter, family proxy.IPFamily, name proxy.ServicePortName, ps []netip.Prefix) {
	t.Helper()
	for i, p := range ps {
		if err := checkAddr(family, p.Addr()); err != nil || p != p.Masked() || p.Bits() == 0 {
			t.Errorf("%s: %s: source range %s not a masked non-zero prefix of the family (%v)", family, name, p, err)
		}
		if i > 0 && ps[i-1].Addr().Compare(p.Addr()) > 0 {
			t.Errorf("%s: %s: source ranges %s and %s unsorted", family, name, ps[i-1], p)
		}
		for _, q := range ps[:i] {
			if q.Overlaps(p) {
				t.Errorf("%s: %s: source ranges %s and %s overlap", family, name, q, p)
			}
		}
	}
}
