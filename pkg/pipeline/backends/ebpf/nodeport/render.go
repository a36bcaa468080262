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
	// Tunnels are the endpoints on peer nodes that DSR ports reach by
	// tunnel, each with its node (render_dsr.go); Peers the nodes that
	// decapsulate, the only sources a tunnelled packet is taken from.
	Tunnels map[A]tunnelOf[A]
	Peers   map[A]peerVal
	// tunnelRoutes are the DSR frontends' tunnels to nodes, which a UDP
	// flow's entry names: a sync that drops one deletes its flows.
	tunnelRoutes map[tunnelRoute[A]]struct{}
	Config       cfgValOf[A]
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
		Ranges: map[srcKeyOf[A]]uint32{}, Members: map[memberKeyOf[A]]uint32{},
		Tunnels: map[A]tunnelOf[A]{}, Peers: map[A]peerVal{}, tunnelRoutes: map[tunnelRoute[A]]struct{}{}}
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
// A port with direct server return (desired's DSR) also gets its tunnels,
// and the frontends its peers' tunnelled flows look up (renderDSR);
// np_peers holds the State's peers, and np_ranges under inClusterID its
// ClusterSources.
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
	taken := map[uint64]bool{inClusterID: true}
	for _, name := range slices.SortedFunc(st.Services.Keys(), proxy.ServicePortName.Compare) {
		sp := st.Service(name)
		if !Served(st.Family, sp) {
			continue
		}
		fs := frontends[A](sp, nodePortIPs)
		if fs.empty() {
			continue
		}
		v := group(&c, sp, st.RoutesOf(sp)[desired.ExternalPath][desired.FromOutside], taken)
		for _, k := range slices.Concat(fs.external, fs.nodePorts) {
			c.Services[k] = v
		}
		if len(fs.lbs) > 0 && sp.AllowedSources != nil {
			v.Flags |= flagRanges
			ranges(&c, v.ID, sp.AllowedSources)
		}
		for _, k := range fs.lbs {
			c.Services[k] = v
		}
		if sp.DSR != nil {
			renderDSR(&c, sp, fs, st.NodeIPs, taken)
		}
	}
	peers(&c, st.Peers)
	ranges(&c, inClusterID, st.ClusterSources)
	return c
}

// frontendSet is a port's frontends of one family: its external IPs and
// node ports, which are never filtered by source, and its LB IPs.
type frontendSet[A addrBytes] struct{ external, nodePorts, lbs []svcKeyOf[A] }

func (fs frontendSet[A]) empty() bool { return len(fs.external)+len(fs.nodePorts)+len(fs.lbs) == 0 }

// frontends lists sp's frontends of A's family, node ports on every
// address of nodePortIPs.
func frontends[A addrBytes](sp *desired.ServicePort, nodePortIPs []netip.Addr) frontendSet[A] {
	proto := protoNumbers[sp.Protocol]
	family := familyOf[A]()
	add := func(out []svcKeyOf[A], ip netip.Addr, port uint16) []svcKeyOf[A] {
		if ip = ip.Unmap(); family.Contains(ip) {
			out = append(out, frontendKey[A](ip, port, proto))
		}
		return out
	}
	var fs frontendSet[A]
	for _, ip := range sp.ExternalIPs {
		fs.external = add(fs.external, ip, sp.Port)
	}
	if sp.NodePort != 0 {
		for _, ip := range nodePortIPs {
			fs.nodePorts = add(fs.nodePorts, ip, sp.NodePort)
		}
	}
	for _, ip := range sp.LoadBalancerIPs {
		fs.lbs = add(fs.lbs, ip, sp.Port)
	}
	return fs
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
	v := dispatchGroup(c, sp, sp.Dispatch(route.Set), probe(groupID(sp.Name, route.Set), taken))
	if route.Masquerade {
		v.Flags |= flagMasq
	}
	return v
}

// probe takes the first ID from id on that no group has taken.
func probe(id uint64, taken map[uint64]bool) uint64 {
	for taken[id] {
		id++
	}
	taken[id] = true
	return id
}

// dispatchGroup renders d's endpoints as group id, with its members when
// sp has ClientIP affinity and its Maglev table when sp balances by
// Maglev, and returns the record of the frontends that use it.
func dispatchGroup[A addrBytes](c *contentsOf[A], sp *desired.ServicePort, d desired.Dispatch, id uint64) svcVal {
	v := svcVal{ID: id, Count: uint32(len(d.Endpoints)), Affinity: uint32(max(sp.AffinitySeconds, 0))}
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
	return groupIDOf(name, set.String())
}

// groupIDOf is the ID of port name's group named what before probing.
func groupIDOf(name proxy.ServicePortName, what string) uint64 {
	h := fnv.New64a()
	for _, s := range []string{"nodeport", name.Namespace, name.Name, name.Port, string(name.Protocol), what} {
		_, _ = h.Write([]byte(s))
		_, _ = h.Write([]byte{0})
	}
	return h.Sum64()
}
