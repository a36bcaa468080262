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

// maxOtherNodeAddrs bounds the addresses kept of a Node besides its node
// IPs: its status may list any number (its kubelet writes them), and
// every proxy holds every Node.
const maxOtherNodeAddrs = 8

// trimNode is the informer's transform: a Node becomes its identity, its
// node IPs (as InternalIPs, so that nodeIPs picks them again), up to
// maxOtherNodeAddrs of its other InternalIP and ExternalIP addresses (as
// ExternalIPs, after them: never picked) and its pod CIDRs (one per
// family, as the API server allows); anything else passes unchanged.
func trimNode(obj any) (any, error) {
	node, ok := obj.(*v1.Node)
	if !ok {
		return obj, nil
	}
	out := &v1.Node{ObjectMeta: identity(&node.ObjectMeta),
		Spec: v1.NodeSpec{PodCIDRs: slices.Clone(node.Spec.PodCIDRs[:min(len(node.Spec.PodCIDRs), 2)])}}
	ips := nodeIPs(node)
	for _, ip := range ips {
		out.Status.Addresses = append(out.Status.Addresses, v1.NodeAddress{Type: v1.NodeInternalIP, Address: ip.String()})
	}
	others := 0
	for _, a := range node.Status.Addresses {
		ip, err := netip.ParseAddr(a.Address)
		if others == maxOtherNodeAddrs || err != nil || (a.Type != v1.NodeInternalIP && a.Type != v1.NodeExternalIP) ||
			slices.Contains(ips, ip.Unmap()) {
			continue
		}
		out.Status.Addresses = append(out.Status.Addresses, v1.NodeAddress{Type: v1.NodeExternalIP, Address: ip.Unmap().String()})
		others++
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
