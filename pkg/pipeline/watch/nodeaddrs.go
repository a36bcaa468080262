package watch

import (
	"context"
	"net/netip"
	"slices"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"
)

// NodeAddresses watches every Node of the cluster and reports the union of
// their addresses (each Node's as NodeInfo.IPs takes its own: first
// InternalIP, else ExternalIP, per family), sorted and unique, whenever it
// changes. Upstream watches only its own Node; this watch is opt-in
// (--watch-node-addresses) because every proxy then receives every Node's
// status updates. The transform keeps of each Node only its name and
// those addresses, so the store holds nothing else; each update is still
// received and decoded whole first.
type NodeAddresses struct{ union[netip.Addr] }

// NewNodeAddresses returns a watcher that calls changed (from the
// informer's goroutine) with the union after every change of it.
func NewNodeAddresses(client kubernetes.Interface, resync time.Duration, changed func([]netip.Addr)) *NodeAddresses {
	return &NodeAddresses{newUnion(client, resync, "Node addresses", NodeAddressesOf, changed)}
}

// Start runs the watch on an informer of its own until ctx ends.
func (w *NodeAddresses) Start(ctx context.Context) error {
	nodes, err := newClusterNodes(w.client, w.resync, w.reconnect)
	if err != nil {
		return err
	}
	if err := w.StartOn(ctx, nodes); err != nil {
		return err
	}
	nodes.Start(ctx)
	return nil
}

// StartOn registers the watch on nodes, shared with other watchers, until
// ctx ends; it runs once the caller starts nodes.
func (w *NodeAddresses) StartOn(ctx context.Context, nodes *ClusterNodes) error {
	return w.start(ctx, nodes.informer, sameAddrs)
}

// trimNode is the informer's transform: a Node becomes its identity, its
// InternalIP and ExternalIP addresses (nodeIPs picks from them as from
// the whole Node's) and its pod CIDRs; anything else passes unchanged.
func trimNode(obj any) (any, error) {
	node, ok := obj.(*v1.Node)
	if !ok {
		return obj, nil
	}
	out := &v1.Node{ObjectMeta: identity(&node.ObjectMeta), Spec: v1.NodeSpec{PodCIDRs: node.Spec.PodCIDRs}}
	for _, a := range node.Status.Addresses {
		if a.Type == v1.NodeInternalIP || a.Type == v1.NodeExternalIP {
			out.Status.Addresses = append(out.Status.Addresses, a)
		}
	}
	return out, nil
}

// NodeAddressesOf is the sorted, unique union of the addresses of the
// Nodes in objs (never nil), as NodeInfoOf takes a Node's own.
func NodeAddressesOf(objs []any) []netip.Addr {
	out := []netip.Addr{}
	for _, obj := range objs {
		if node, ok := obj.(*v1.Node); ok {
			out = append(out, nodeIPs(node)...)
		}
	}
	slices.SortFunc(out, netip.Addr.Compare)
	return slices.Compact(out)
}
