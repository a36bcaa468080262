package nodeport

import (
	"errors"
	"maps"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"
	"k8s.io/klog/v2"
)

// A UDP flow this node tunnels to a peer (DSR) has one entry, naming the
// frontend the client sent to and the node: the endpoint is the peer's
// choice, and the peer's own table names it, where the conntrack cleanup
// finds it when it goes. This node deletes the flow when the node no
// longer serves the frontend (none of the port's endpoints is there any
// more, or it stopped being a peer), so that a client streaming to it picks
// anew with its next datagram instead of being dropped there until it is
// quiet for UDP's timeout. TCP notices by itself, as it does an endpoint
// that went.

// lostRoutes are the routes of was that now lacks.
func lostRoutes[A addrBytes](was, now map[tunnelRoute[A]]struct{}) map[tunnelRoute[A]]struct{} {
	lost := maps.Clone(was)
	maps.DeleteFunc(lost, func(r tunnelRoute[A], _ struct{}) bool {
		_, ok := now[r]
		return ok
	})
	return lost
}

// goneRoutes says along which routes a sync deletes the UDP flows
// tunnelled: those of was that now lacks, and at a process's first sync
// (was nil) every route now lacks, since the table may hold flows an
// earlier process tunnelled along routes lost while none ran. nil when
// there are none.
func goneRoutes[A addrBytes](was, now map[tunnelRoute[A]]struct{}) func(tunnelRoute[A]) bool {
	if was == nil {
		return func(r tunnelRoute[A]) bool {
			_, ok := now[r]
			return !ok
		}
	}
	lost := lostRoutes(was, now)
	if len(lost) == 0 {
		return nil
	}
	return func(r tunnelRoute[A]) bool {
		_, ok := lost[r]
		return ok
	}
}

// deleteTunnelFlows deletes from ct, A's family's table, the UDP flows
// tunnelled along a route gone says is, and returns how many it deleted.
func deleteTunnelFlows[A addrBytes](ct *ebpf.Map, gone func(tunnelRoute[A]) bool) (int, error) {
	var (
		k    ctKeyOf[A]
		v    ctValOf[A]
		dead []ctKeyOf[A]
	)
	it := ct.Iterate()
	for it.Next(&k, &v) {
		if k.Proto != unix.IPPROTO_UDP || v.At != ctAtTunnel || v.Reply != 0 {
			continue
		}
		route := tunnelRoute[A]{Frontend: svcKeyOf[A]{Addr: k.Dst, Port: k.Dport, Proto: k.Proto}, Node: v.Dst}
		if gone(route) {
			dead = append(dead, k)
		}
	}
	if err := it.Err(); err != nil {
		return 0, err
	}
	n := 0
	for _, k := range dead {
		if err := ct.Delete(k); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			return n, err
		}
		n++
	}
	return n, nil
}

// dropTunnelFlows deletes, in the background, the UDP flows of A's family
// tunnelled along a route gone says is, and counts them among the flows
// deleted (Flows.Deleted). The caller holds p.mu.
func dropTunnelFlows[A addrBytes](p *Proxier, gone func(tunnelRoute[A]) bool) {
	family := familyOf[A]()
	err := p.inBackground(func(maps map[string]*ebpf.Map) {
		n, err := deleteTunnelFlows(maps[namesOf[A]().ct], gone)
		p.flows.deleted[familyIndex(family)].Add(uint64(n))
		if err != nil {
			klog.ErrorS(err, "Could not delete the UDP flows tunnelled to nodes that no longer serve them", "ipFamily", family)
		}
	})
	if err != nil {
		klog.ErrorS(err, "Could not delete the UDP flows tunnelled to nodes that no longer serve them", "ipFamily", family)
	}
}
