package watch

import (
	"context"
	"net/netip"
	"slices"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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

// Start runs the informer until ctx ends.
func (w *NodeAddresses) Start(ctx context.Context) error {
	noTweak := func(*metav1.ListOptions) {}
	informer := newInformer(listWatch[*v1.NodeList](w.client.CoreV1().Nodes(), noTweak),
		w.client, &v1.Node{}, "nodes", w.resync, w.reconnect)
	if err := informer.SetTransform(trimNode); err != nil {
		return err
	}
	sameAddrs := func(old, new any) bool {
		o, ok1 := old.(*v1.Node)
		n, ok2 := new.(*v1.Node)
		return ok1 && ok2 && slices.Equal(o.Status.Addresses, n.Status.Addresses)
	}
	if err := w.start(ctx, informer, sameAddrs); err != nil {
		return err
	}
	go informer.RunWithContext(ctx)
	return nil
}

// trimNode is the informer's transform: a Node becomes its identity and
// the addresses that count; anything else passes unchanged.
func trimNode(obj any) (any, error) {
	node, ok := obj.(*v1.Node)
	if !ok {
		return obj, nil
	}
	out := &v1.Node{ObjectMeta: identity(&node.ObjectMeta)}
	for _, ip := range nodeIPs(node) {
		out.Status.Addresses = append(out.Status.Addresses, v1.NodeAddress{Type: v1.NodeInternalIP, Address: ip.String()})
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
