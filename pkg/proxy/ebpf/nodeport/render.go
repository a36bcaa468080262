package nodeport

import (
	"hash/fnv"
	"net/netip"
	"slices"

	"github.com/svcproxy/svcproxy/pkg/proxy"
	"github.com/svcproxy/svcproxy/pkg/proxy/desired"
	"github.com/svcproxy/svcproxy/pkg/proxy/maglev"
)

// Contents is what the programs' maps hold for one State.
type Contents struct {
	Services map[svcKey]svcVal
	Backends map[beKey]beVal
	Maglev   map[beKey]beVal
	Config   cfgVal
}

func newContents() Contents {
	return Contents{Services: map[svcKey]svcVal{}, Backends: map[beKey]beVal{}, Maglev: map[beKey]beVal{}}
}

// Served says whether the tc programs translate sp's external frontends.
// What they do not serve is left to the nftables half, which still has
// its rules: IPv6, SCTP, ClientIP affinity (not yet at tc), and LB IPs
// with source ranges (served only with the ranges' check, not yet here).
func Served(family proxy.IPFamily, sp *desired.ServicePort) bool {
	_, ok := protoNumbers[sp.Protocol]
	return family == proxy.IPv4 && ok && sp.AffinitySeconds == 0
}

// Render is the pure translation of an IPv4 State into map contents: each
// served port's node ports (on every node-port address), external IPs and
// LB IPs without source ranges point at the dispatch desired routes
// traffic from outside the node to, with the route's masquerade and the
// port's balancing. The masquerade address is the node's primary IP.
//
// A group's ID is a hash of the service port's name and dispatch set,
// probed past collisions in name order, so that the same State always
// renders the same maps and a restart writes nothing.
func Render(st *desired.State) Contents {
	c := newContents()
	if st.Family != proxy.IPv4 {
		return c
	}
	if len(st.NodeIPs) > 0 && st.NodeIPs[0].Unmap().Is4() {
		c.Config.SNAT = st.NodeIPs[0].Unmap().As4()
	}
	var nodePortIPs []netip.Addr
	for _, ip := range st.NodePortAddresses() {
		if ip = ip.Unmap(); ip.Is4() && !ip.IsLoopback() {
			nodePortIPs = append(nodePortIPs, ip)
		}
	}
	taken := map[uint64]bool{}
	for _, name := range slices.SortedFunc(st.Services.Keys(), proxy.ServicePortName.Compare) {
		sp := st.Service(name)
		if !Served(st.Family, sp) {
			continue
		}
		fronts := frontends(sp, nodePortIPs)
		if len(fronts) == 0 {
			continue
		}
		v := group(&c, sp, st.RoutesOf(sp)[desired.ExternalPath][desired.FromOutside], taken)
		for _, k := range fronts {
			c.Services[k] = v
		}
	}
	return c
}

// frontends lists sp's node ports, external IPs and LB IPs.
func frontends(sp *desired.ServicePort, nodePortIPs []netip.Addr) []svcKey {
	proto := protoNumbers[sp.Protocol]
	var out []svcKey
	add := func(ip netip.Addr, port uint16) {
		if ip = ip.Unmap(); ip.Is4() {
			out = append(out, frontendKey(ip, port, proto))
		}
	}
	for _, ip := range sp.ExternalIPs {
		add(ip, sp.Port)
	}
	if sp.AllowedSources == nil {
		for _, ip := range sp.LoadBalancerIPs {
			add(ip, sp.Port)
		}
	}
	if sp.NodePort != 0 {
		for _, ip := range nodePortIPs {
			add(ip, sp.NodePort)
		}
	}
	return out
}

// group renders the endpoints of route's dispatch, and its Maglev table
// when the port balances by Maglev, and returns the frontends' record.
func group(c *Contents, sp *desired.ServicePort, route desired.Route, taken map[uint64]bool) svcVal {
	d := sp.Dispatch(route.Set)
	id := groupID(sp.Name, route.Set)
	for taken[id] {
		id++
	}
	taken[id] = true
	v := svcVal{ID: id, Count: uint32(len(d.Endpoints))}
	if route.Masquerade {
		v.Flags |= flagMasq
	}
	if len(d.Endpoints) == 0 {
		if d.Empty == desired.Drop {
			v.Flags |= flagDrop
		}
		return v
	}
	for i, ep := range d.Endpoints {
		c.Backends[beKey{ID: id, Slot: uint32(i)}] = endpointVal(ep)
	}
	if sp.ExternalBalancing == proxy.BalanceMaglev {
		t := maglev.New(d.Endpoints)
		for i, b := range t.Slots {
			c.Maglev[beKey{ID: id, Slot: uint32(i)}] = endpointVal(t.Backends[b])
		}
		v.Flags |= flagMaglev
		v.MSize = uint32(len(t.Slots))
	}
	return v
}

func groupID(name proxy.ServicePortName, set desired.Set) uint64 {
	h := fnv.New64a()
	for _, s := range []string{"nodeport", name.Namespace, name.Name, name.Port, string(name.Protocol), set.String()} {
		_, _ = h.Write([]byte(s))
		_, _ = h.Write([]byte{0})
	}
	return h.Sum64()
}
