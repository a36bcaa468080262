package desired

import (
	"slices"

	"github.com/svcproxy/svcproxy/pkg/pipeline/model"
	"github.com/svcproxy/svcproxy/pkg/proxy"
)

// endpointSets are the two endpoint choices a service port's dispatches are
// made of, following upstream's CategorizeEndpoints.
type endpointSets struct {
	// cluster is the ready endpoints (topology applied), else the serving and
	// terminating ones. Empty means the service has no usable endpoint.
	cluster []Endpoint
	// local is the ready endpoints on this node, else the serving and
	// terminating ones on this node.
	local []Endpoint
}

// categorize splits a service port's endpoints into the cluster and local
// sets. The model keeps endpoints sorted and without duplicates, and
// filtering keeps that order, so both sets come out sorted without extra
// work; a set that keeps every endpoint is the model's own list (pick).
func categorize(eps model.EndpointList, family proxy.IPFamily, node Node) endpointSets {
	topo := topologyFromHints(eps, node)
	sets := endpointSets{
		cluster: pick(eps, family, func(e *model.EndpointInfo) bool { return e.Ready && topo.admits(e) }),
	}
	if len(sets.cluster) == 0 {
		// Topology never empties the ready set (it is ignored when no ready
		// endpoint fits this node), so this means nothing is ready anywhere.
		sets.cluster = pick(eps, family, servingTerminating)
	}
	isLocal := func(e *model.EndpointInfo) bool { return node.Name != "" && e.NodeName == node.Name }
	sets.local = pick(eps, family, func(e *model.EndpointInfo) bool { return isLocal(e) && e.Ready })
	if len(sets.local) == 0 {
		sets.local = pick(eps, family, func(e *model.EndpointInfo) bool { return isLocal(e) && servingTerminating(e) })
	}
	// Without topology and with ready endpoints the local set is a subset
	// of cluster; sharing the cluster slice when they are equal saves memory.
	if slices.Equal(sets.local, sets.cluster) {
		sets.local = sets.cluster
	}
	return sets
}

func servingTerminating(e *model.EndpointInfo) bool { return e.Serving && e.Terminating }

// pick returns the endpoints of family that satisfy keep, sorted by address
// and port without duplicates (the model's lists are). When that is every
// endpoint, which is the common case (all ready, no topology hints), it
// returns the model's own list rather than a copy: the largest part of a
// State's memory otherwise (about half of it).
// It returns nil rather than an empty slice so that States compare equal
// however they were built.
func pick(eps model.EndpointList, family proxy.IPFamily, keep func(*model.EndpointInfo) bool) []Endpoint {
	addrs, infos := eps.Addrs(), eps.Infos()
	n := 0
	for i, info := range infos {
		if keep(info) && family.Contains(addrs[i].IP) {
			n++
		}
	}
	switch n {
	case 0:
		return nil
	case len(addrs):
		return addrs
	}
	out := make([]Endpoint, 0, n)
	for i, info := range infos {
		if keep(info) && family.Contains(addrs[i].IP) {
			out = append(out, addrs[i])
		}
	}
	return out
}

// topology is the hint filter chosen for one service port.
type topology struct {
	node string // keep endpoints hinted for this node, when set
	zone string // else keep endpoints hinted for this zone, when set
}

// admits reports whether e survives the topology filter.
func (t topology) admits(e *model.EndpointInfo) bool {
	switch {
	case t.node != "":
		return slices.Contains(e.NodeHints, t.node)
	case t.zone != "":
		return slices.Contains(e.ZoneHints, t.zone)
	}
	return true
}

// topologyFromHints mirrors upstream: hints are all-or-nothing. Same-node
// applies when every ready endpoint has node hints and one names this node;
// else same-zone when every ready endpoint has zone hints and one names this
// node's zone; else no filtering. Upstream keys this off the hints alone (the
// EndpointSlice controller only writes them when the Service asks, through
// trafficDistribution or the topology-mode annotation), so we do too.
func topologyFromHints(eps model.EndpointList, node Node) topology {
	anyReady := false
	allNode, forNode := true, false
	allZone, forZone := true, false
	for _, e := range eps.Infos() {
		if !e.Ready {
			continue
		}
		anyReady = true
		if len(e.NodeHints) == 0 {
			allNode = false
		} else if slices.Contains(e.NodeHints, node.Name) {
			forNode = true
		}
		if len(e.ZoneHints) == 0 {
			allZone = false
		} else if slices.Contains(e.ZoneHints, node.Zone) {
			forZone = true
		}
	}
	switch {
	case !anyReady:
		return topology{}
	case allNode && forNode && node.Name != "":
		return topology{node: node.Name}
	case allZone && forZone && node.Zone != "":
		return topology{zone: node.Zone}
	}
	return topology{}
}
