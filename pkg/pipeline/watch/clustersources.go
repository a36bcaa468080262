package watch

import (
	"context"
	"net/netip"
	"slices"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"
)

// ClusterSources watches every Node of the cluster and reports the
// sources inside it: each Node's internal and external addresses, as
// single-address prefixes, and its pod CIDRs, sorted and unique, whenever
// they change. Direct server return never tunnels their flows
// (--bpf-dsr, desired.State.ClusterSources). It shares the Nodes'
// informer (ClusterNodes).
type ClusterSources struct{ union[netip.Prefix] }

// NewClusterSources returns a watcher that calls changed (from the
// informer's goroutine) with the sources after every change of them.
func NewClusterSources(client kubernetes.Interface, resync time.Duration, changed func([]netip.Prefix)) *ClusterSources {
	return &ClusterSources{newUnion(client, resync, "cluster sources", ClusterSourcesOf, changed)}
}

// StartOn registers the watch on nodes, shared with other watchers, until
// ctx ends; it runs once the caller starts nodes.
func (w *ClusterSources) StartOn(ctx context.Context, nodes *ClusterNodes) error {
	return w.start(ctx, nodes.informer, sameAddrs)
}

// ClusterSourcesOf is the sorted, unique list of the sources of the Nodes
// in objs (never nil). Every address counts, not only the one per family
// a proxy takes as its node IP: a host may send from any of them, and one
// too many only masquerades a flow DSR could have tunnelled.
func ClusterSourcesOf(objs []any) []netip.Prefix {
	out := []netip.Prefix{}
	for _, obj := range objs {
		node, ok := obj.(*v1.Node)
		if !ok {
			continue
		}
		for _, a := range node.Status.Addresses {
			ip, err := netip.ParseAddr(a.Address)
			if err == nil && (a.Type == v1.NodeInternalIP || a.Type == v1.NodeExternalIP) {
				out = append(out, netip.PrefixFrom(ip.Unmap(), ip.Unmap().BitLen()))
			}
		}
		for _, c := range node.Spec.PodCIDRs {
			if p, err := netip.ParsePrefix(c); err == nil {
				out = append(out, p.Masked())
			}
		}
	}
	slices.SortFunc(out, netip.Prefix.Compare)
	return slices.Compact(out)
}
