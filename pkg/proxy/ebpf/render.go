package ebpf

import (
	"hash/fnv"
	"net/netip"
	"slices"

	"github.com/svcproxy/svcproxy/pkg/proxy"
	"github.com/svcproxy/svcproxy/pkg/proxy/desired"
)

// Contents is what the service and backend maps of one family hold.
type Contents struct {
	Services map[svcKey]svcVal
	Backends map[beKey]beVal
}

// Render is the pure translation of a State into map contents. Socket
// hooks see sockets of pods and of the node alike and cannot tell them
// apart; they are attached to the pods' cgroup, so every frontend takes the
// route desired decided for traffic from a pod.
//
// An endpoint group's ID is a hash of its service port and dispatch set,
// probed past collisions in name order: the same State always renders the
// same IDs, so a restarted svcproxy finds its own contents in the maps.
func Render(st *desired.State) Contents {
	c := Contents{Services: map[svcKey]svcVal{}, Backends: map[beKey]beVal{}}
	names := slices.SortedFunc(st.Services.Keys(), proxy.ServicePortName.Compare)
	ids := map[uint64]bool{}
	nodePortIPs := nodePortAddrs(st)
	for _, name := range names {
		sp := st.Service(name)
		proto, ok := protoNumbers[sp.Protocol]
		if !ok {
			continue
		}
		routes := st.RoutesOf(sp)
		internal := c.group(ids, sp, routes[desired.ClusterIPPath][desired.FromPod].Set)
		c.Services[frontendKey(sp.ClusterIP, sp.Port, proto)] = internal
		fronts := externalFrontends(sp, proto, nodePortIPs)
		if len(fronts) == 0 {
			continue
		}
		external := c.group(ids, sp, routes[desired.ExternalPath][desired.FromPod].Set)
		for _, k := range fronts {
			c.Services[k] = external
		}
	}
	return c
}

// externalFrontends lists sp's node ports, external IPs and LB IPs.
func externalFrontends(sp *desired.ServicePort, proto uint8, nodePortIPs []netip.Addr) []svcKey {
	var out []svcKey
	for _, ip := range sp.ExternalIPs {
		out = append(out, frontendKey(ip, sp.Port, proto))
	}
	// Source ranges need the client's address, which a socket hook does
	// not have yet: such LB IPs are left to the packet path.
	if sp.AllowedSources == nil {
		for _, ip := range sp.LoadBalancerIPs {
			out = append(out, frontendKey(ip, sp.Port, proto))
		}
	}
	if sp.NodePort != 0 {
		for _, ip := range nodePortIPs {
			out = append(out, frontendKey(ip, sp.NodePort, proto))
		}
	}
	return out
}

// group renders the endpoint group of sp's dispatch set and returns the
// service record that points at it.
func (c *Contents) group(ids map[uint64]bool, sp *desired.ServicePort, set desired.Set) svcVal {
	d := sp.Dispatch(set)
	id := groupID(sp.Name, set)
	for ids[id] {
		id++
	}
	ids[id] = true
	for i, ep := range d.Endpoints {
		c.Backends[beKey{ID: id, Slot: uint32(i)}] = endpointVal(ep)
	}
	v := svcVal{ID: id, Count: uint32(len(d.Endpoints)), Affinity: uint32(max(sp.AffinitySeconds, 0))}
	if len(d.Endpoints) == 0 && d.Empty == desired.Drop {
		v.Flags = flagDrop
	}
	return v
}

func groupID(name proxy.ServicePortName, set desired.Set) uint64 {
	h := fnv.New64a()
	for _, s := range []string{name.Namespace, name.Name, name.Port, string(name.Protocol), set.String()} {
		_, _ = h.Write([]byte(s))
		_, _ = h.Write([]byte{0})
	}
	return h.Sum64()
}

// nodePortAddrs lists the destination addresses node ports answer on, as
// desired resolved them: the bound addresses where it resolved them, else
// the node's IPs for "all", else the selected ones.
func nodePortAddrs(st *desired.State) []netip.Addr {
	switch {
	case len(st.NodePorts.Bound) > 0:
		return st.NodePorts.Bound
	case st.NodePorts.All:
		return st.NodeIPs
	}
	return st.NodePorts.IPs
}
