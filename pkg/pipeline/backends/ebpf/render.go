package ebpf

import (
	"hash/fnv"
	"net/netip"
	"slices"

	"github.com/svcproxy/svcproxy/pkg/pipeline/desired"
	"github.com/svcproxy/svcproxy/pkg/pipeline/reconcile"
	"github.com/svcproxy/svcproxy/pkg/proxy"
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
	c := newContents()
	for _, pt := range newStore().render(st, true, nil) {
		if pt == nil {
			continue
		}
		for _, it := range pt.records {
			c.Services[it.Key] = it.Value
		}
		for _, it := range pt.slots {
			c.Backends[it.Key] = it.Value
		}
	}
	return c
}

// part is what one service port claims in the maps: its frontends'
// records (the cluster IP's last, then its any-port record), and its
// endpoint groups' slots, each group's a run in slot order.
type part struct {
	records []reconcile.Item[svcKey, svcVal]
	slots   []reconcile.Item[beKey, beVal]
	groups  []group
	inline  [2]group // groups' array for up to two, the usual
}

// group is one endpoint group of a part: its ID and its run of slots.
type group struct {
	id    uint64
	first int // index in part.slots
	count int
}

// renderer renders service ports one at a time; taken holds the group IDs
// in use, so that a port rendered alone (a partial sync) probes past the
// others' IDs.
type renderer struct {
	st          *desired.State
	taken       map[uint64]bool
	nodePortIPs []netip.Addr
}

// port renders sp, or nil for a protocol the hooks do not translate.
func (r *renderer) port(sp *desired.ServicePort) *part {
	proto, ok := protoNumbers[sp.Protocol]
	if !ok {
		return nil
	}
	fronts := externalFrontends(sp, proto, r.nodePortIPs)
	// Sized once: a full sync renders every port.
	pt := &part{records: make([]reconcile.Item[svcKey, svcVal], 0, len(fronts)+2)}
	pt.groups = pt.inline[:0]
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
				groups[set] = r.group(pt, sp, set)
			}
			*side.to = groups[set]
		}
		return v
	}
	cluster := record(desired.ClusterIPPath)
	if len(fronts) > 0 {
		external := record(desired.ExternalPath)
		for _, k := range fronts {
			pt.records = append(pt.records, reconcile.Item[svcKey, svcVal]{Key: k, Value: external})
		}
	}
	pt.records = append(pt.records,
		reconcile.Item[svcKey, svcVal]{Key: frontendKey(sp.ClusterIP, sp.Port, proto), Value: cluster},
		reconcile.Item[svcKey, svcVal]{Key: anyPort(sp.ClusterIP)})
	return pt
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

// group renders the endpoint group of sp's dispatch set into pt and
// returns the target that points at it.
func (r *renderer) group(pt *part, sp *desired.ServicePort, set desired.Set) target {
	d := sp.Dispatch(set)
	id := groupID(sp.Name, set)
	for r.taken[id] {
		id++
	}
	r.taken[id] = true
	pt.groups = append(pt.groups, group{id: id, first: len(pt.slots), count: len(d.Endpoints)})
	pt.slots = slices.Grow(pt.slots, len(d.Endpoints))
	for i, ep := range d.Endpoints {
		pt.slots = append(pt.slots, reconcile.Item[beKey, beVal]{Key: beKey{ID: id, Slot: uint32(i)}, Value: endpointVal(ep)})
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
