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

func newContents() Contents {
	return Contents{Services: map[svcKey]svcVal{}, Backends: map[beKey]beVal{}}
}

// Render is the pure translation of a State into map contents. Every
// frontend holds two targets: the route desired decided for traffic from a
// pod, and the one for traffic from the node, which the hooks take for
// sockets in the node's own network namespace. A cluster IP also gets a
// record for the ports its Service lacks, which rejects.
//
// An endpoint group's ID is a hash of its service port and dispatch set,
// probed past collisions in name order: the same State always renders the
// same IDs, so a restarted svcproxy finds its own contents in the maps.
func Render(st *desired.State) Contents {
	c, _ := renderAll(st)
	return c
}

// frontendIndex lists, per service port, the frontends it rendered: what a
// partial sync must remove or replace when the port changes.
type frontendIndex map[proxy.ServicePortName][]svcKey

// renderAll is Render, also returning the index and the IDs it took.
func renderAll(st *desired.State) (Contents, frontendIndex) {
	c := newContents()
	idx := frontendIndex{}
	r := renderer{st: st, taken: map[uint64]bool{}, nodePortIPs: st.NodePortAddresses()}
	for _, name := range slices.SortedFunc(st.Services.Keys(), proxy.ServicePortName.Compare) {
		sp := st.Service(name)
		if keys := r.port(&c, sp); len(keys) > 0 {
			idx[name] = keys
			c.Services[anyPort(sp.ClusterIP)] = svcVal{}
		}
	}
	return c, idx
}

// renderer renders service ports one at a time; taken holds the group IDs
// in use, so that a port rendered alone (a partial sync) probes past the
// others' IDs.
type renderer struct {
	st          *desired.State
	taken       map[uint64]bool
	nodePortIPs []netip.Addr
}

// port renders sp into c and returns its frontends, the cluster IP's last.
func (r *renderer) port(c *Contents, sp *desired.ServicePort) []svcKey {
	proto, ok := protoNumbers[sp.Protocol]
	if !ok {
		return nil
	}
	routes := r.st.RoutesOf(sp)
	groups := map[desired.Set]target{}
	record := func(path desired.Path) svcVal {
		v := svcVal{Affinity: uint32(max(sp.AffinitySeconds, 0))}
		for _, side := range []struct {
			to  *target
			src desired.Source
		}{{&v.Pod, desired.FromPod}, {&v.Node, desired.FromNode}} {
			set := routes[path][side.src].Set
			if _, ok := groups[set]; !ok {
				groups[set] = r.group(c, sp, set)
			}
			*side.to = groups[set]
		}
		return v
	}
	cluster := frontendKey(sp.ClusterIP, sp.Port, proto)
	c.Services[cluster] = record(desired.ClusterIPPath)
	fronts := externalFrontends(sp, proto, r.nodePortIPs)
	if len(fronts) > 0 {
		external := record(desired.ExternalPath)
		for _, k := range fronts {
			c.Services[k] = external
		}
	}
	return append(fronts, cluster)
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
// target that points at it.
func (r *renderer) group(c *Contents, sp *desired.ServicePort, set desired.Set) target {
	d := sp.Dispatch(set)
	id := groupID(sp.Name, set)
	for r.taken[id] {
		id++
	}
	r.taken[id] = true
	for i, ep := range d.Endpoints {
		c.Backends[beKey{ID: id, Slot: uint32(i)}] = endpointVal(ep)
	}
	tg := target{ID: id, Count: uint32(len(d.Endpoints))}
	if len(d.Endpoints) == 0 && d.Empty == desired.Drop {
		tg.Flags = flagDrop
	}
	return tg
}

func groupID(name proxy.ServicePortName, set desired.Set) uint64 {
	h := fnv.New64a()
	for _, s := range []string{name.Namespace, name.Name, name.Port, string(name.Protocol), set.String()} {
		_, _ = h.Write([]byte(s))
		_, _ = h.Write([]byte{0})
	}
	return h.Sum64()
}
