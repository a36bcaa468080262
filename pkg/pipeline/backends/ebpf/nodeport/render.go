package nodeport

import (
	"hash/fnv"
	"net/netip"
	"slices"

	"github.com/svcproxy/svcproxy/pkg/pipeline/desired"
	"github.com/svcproxy/svcproxy/pkg/proxy"
)

// contentsOf is what the programs' maps of A's family hold for one State.
type contentsOf[A addrBytes] struct {
	Services map[svcKeyOf[A]]svcVal
	Backends map[beKey]beValOf[A]
	// Maglev are the groups' Maglev tables, one entry each (maglev.go).
	Maglev map[uint64]maglevVal
	// maglevEndpoints are the endpoints each Maglev table is built from
	// when it is written.
	maglevEndpoints map[uint64][]proxy.Endpoint
	// Ranges are the allowed source prefixes of the groups whose LB IPs
	// have loadBalancerSourceRanges.
	Ranges map[srcKeyOf[A]]uint32
	// Members are the endpoints of the groups with ClientIP affinity.
	Members map[memberKeyOf[A]]uint32
	Config  cfgValOf[A]
}

// Contents is what the IPv4 maps hold for one State, Contents6 the IPv6
// maps.
type (
	Contents  = contentsOf[[4]byte]
	Contents6 = contentsOf[[16]byte]
)

func newContents[A addrBytes]() contentsOf[A] {
	return contentsOf[A]{Services: map[svcKeyOf[A]]svcVal{}, Backends: map[beKey]beValOf[A]{},
		Maglev: map[uint64]maglevVal{}, maglevEndpoints: map[uint64][]proxy.Endpoint{},
		Ranges: map[srcKeyOf[A]]uint32{}, Members: map[memberKeyOf[A]]uint32{}}
}

// Served says whether the tc programs translate sp's external frontends,
// in either family: TCP and UDP. Nothing translates the others from
// outside the node: the families the programs serve have no nftables
// half (tcServes in internal/backends).
func Served(_ proxy.IPFamily, sp *desired.ServicePort) bool {
	_, ok := protoNumbers[sp.Protocol]
	return ok
}

// Render is render of an IPv4 State, Render6 of an IPv6 one.
func Render(st *desired.State) Contents   { return render[[4]byte](st) }
func Render6(st *desired.State) Contents6 { return render[[16]byte](st) }

// render is the pure translation of a State of A's family into map
// contents (none for a State of the other family): each
// served port's node ports (on every node-port address), external IPs and
// LB IPs point at the dispatch desired routes traffic from outside the
// node to, with the route's masquerade and the port's balancing. LB IPs
// with source ranges (desired's AllowedSources) are flagged, and the
// ranges written for the group: the program drops a new flow from any
// other source, as desired's DROP verdict says; an empty, present list
// (ranges that did not parse) drops every source. A port with ClientIP
// affinity carries its timeout, and its group's endpoints are listed as
// members, so that a client's remembered endpoint counts only while it is
// one. A masqueraded route's flows to endpoints on other nodes leave with
// the node's primary IP; those to local endpoints are not masqueraded (a
// local pod sees the client), nor marked for rules to masquerade them.
//
// A group's ID is a hash of the service port's name and dispatch set,
// probed past collisions in name order, so that the same State always
// renders the same maps and a restart writes nothing.
func render[A addrBytes](st *desired.State) contentsOf[A] {
	c := newContents[A]()
	family := familyOf[A]()
	if st.Family != family {
		return c
	}
	// The node's primary address of the family.
	if i := slices.IndexFunc(st.NodeIPs, family.Contains); i >= 0 {
		c.Config.SNAT = addrOf[A](st.NodeIPs[i])
	}
	var nodePortIPs []netip.Addr
	for _, ip := range st.NodePortAddresses() {
		if ip = ip.Unmap(); family.Contains(ip) && !ip.IsLoopback() {
			nodePortIPs = append(nodePortIPs, ip)
		}
	}
	taken := map[uint64]bool{}
	for _, name := range slices.SortedFunc(st.Services.Keys(), proxy.ServicePortName.Compare) {
		sp := st.Service(name)
		if !Served(st.Family, sp) {
			continue
		}
		open, lbs := frontends[A](sp, nodePortIPs)
		if len(open)+len(lbs) == 0 {
			continue
		}
		v := group(&c, sp, st.RoutesOf(sp)[desired.ExternalPath][desired.FromOutside], taken)
		for _, k := range open {
			c.Services[k] = v
		}
		if len(lbs) > 0 && sp.AllowedSources != nil {
			v.Flags |= flagRanges
			ranges(&c, v.ID, sp.AllowedSources)
		}
		for _, k := range lbs {
			c.Services[k] = v
		}
	}
	return c
}

// frontends lists sp's node ports and external IPs, which are never
// filtered by source, and its LB IPs, of A's family.
func frontends[A addrBytes](sp *desired.ServicePort, nodePortIPs []netip.Addr) (open, lbs []svcKeyOf[A]) {
	proto := protoNumbers[sp.Protocol]
	family := familyOf[A]()
	add := func(out []svcKeyOf[A], ip netip.Addr, port uint16) []svcKeyOf[A] {
		if ip = ip.Unmap(); family.Contains(ip) {
			out = append(out, frontendKey[A](ip, port, proto))
		}
		return out
	}
	for _, ip := range sp.ExternalIPs {
		open = add(open, ip, sp.Port)
	}
	if sp.NodePort != 0 {
		for _, ip := range nodePortIPs {
			open = add(open, ip, sp.NodePort)
		}
	}
	for _, ip := range sp.LoadBalancerIPs {
		lbs = add(lbs, ip, sp.Port)
	}
	return open, lbs
}

// ranges writes group id's allowed source prefixes of A's family (a
// State's are its family's).
func ranges[A addrBytes](c *contentsOf[A], id uint64, allowed []netip.Prefix) {
	family := familyOf[A]()
	for _, p := range allowed {
		if family.Contains(p.Addr()) {
			c.Ranges[sourceKey[A](id, p)] = 1
		}
	}
}

// group renders the endpoints of route's dispatch, and its Maglev table
// when the port balances by Maglev, and returns the frontends' record.
func group[A addrBytes](c *contentsOf[A], sp *desired.ServicePort, route desired.Route, taken map[uint64]bool) svcVal {
	d := sp.Dispatch(route.Set)
	id := groupID(sp.Name, route.Set)
	for taken[id] {
		id++
	}
	taken[id] = true
	v := svcVal{ID: id, Count: uint32(len(d.Endpoints)), Affinity: uint32(max(sp.AffinitySeconds, 0))}
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
		c.Backends[beKey{ID: id, Slot: uint32(i)}] = endpointVal[A](ep)
		if v.Affinity > 0 {
			c.Members[memberOf[A](id, ep)] = 1
		}
	}
	if sp.ExternalBalancing == proxy.BalanceMaglev {
		m, set := maglevOf[A](d.Endpoints)
		c.Maglev[id], c.maglevEndpoints[id] = m, set
		v.Flags |= flagMaglev
		v.MSize = m.Size
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
