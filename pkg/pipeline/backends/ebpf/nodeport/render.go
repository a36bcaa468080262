package nodeport

import (
	"hash/fnv"
	"net/netip"
	"slices"

	"github.com/svcproxy/svcproxy/pkg/pipeline/desired"
	"github.com/svcproxy/svcproxy/pkg/proxy"
)

// Contents is what the programs' maps hold for one State.
type Contents struct {
	Services map[svcKey]svcVal
	Backends map[beKey]beVal
	// Maglev are the groups' Maglev tables, one entry each (maglev.go).
	Maglev map[uint64]maglevVal
	// maglevEndpoints are the endpoints each Maglev table is built from
	// when it is written.
	maglevEndpoints map[uint64][]proxy.Endpoint
	// Ranges are the allowed source prefixes of the groups whose LB IPs
	// have loadBalancerSourceRanges.
	Ranges map[srcKey]uint32
	// Members are the endpoints of the groups with ClientIP affinity.
	Members map[memberKey]uint32
	Config  cfgVal
}

func newContents() Contents {
	return Contents{Services: map[svcKey]svcVal{}, Backends: map[beKey]beVal{}, Maglev: map[uint64]maglevVal{},
		maglevEndpoints: map[uint64][]proxy.Endpoint{}, Ranges: map[srcKey]uint32{}, Members: map[memberKey]uint32{}}
}

// Served says whether the tc programs translate sp's external frontends:
// IPv4 TCP and UDP. In their family nothing else translates packets from
// outside the node (ebpf mode has no nftables half there).
func Served(family proxy.IPFamily, sp *desired.ServicePort) bool {
	_, ok := protoNumbers[sp.Protocol]
	return family == proxy.IPv4 && ok
}

// Render is the pure translation of an IPv4 State into map contents: each
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
		open, lbs := frontends(sp, nodePortIPs)
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
// filtered by source, and its LB IPs.
func frontends(sp *desired.ServicePort, nodePortIPs []netip.Addr) (open, lbs []svcKey) {
	proto := protoNumbers[sp.Protocol]
	add := func(out []svcKey, ip netip.Addr, port uint16) []svcKey {
		if ip = ip.Unmap(); ip.Is4() {
			out = append(out, frontendKey(ip, port, proto))
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

// ranges writes group id's allowed source prefixes (an IPv4 State's are
// IPv4).
func ranges(c *Contents, id uint64, allowed []netip.Prefix) {
	for _, p := range allowed {
		if p.Addr().Is4() {
			c.Ranges[sourceKey(id, p)] = 1
		}
	}
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
		c.Backends[beKey{ID: id, Slot: uint32(i)}] = endpointVal(ep)
		if v.Affinity > 0 {
			c.Members[memberOf(id, ep)] = 1
		}
	}
	if sp.ExternalBalancing == proxy.BalanceMaglev {
		m, set := maglevOf(d.Endpoints)
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
