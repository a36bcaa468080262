package watch

import (
	"context"
	"slices"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
)

// ClusterNodes is the one informer on every Node of the cluster that the
// watchers needing them share (NodeAddresses, Peers, ClusterSources): two informers would
// receive and decode every Node's status updates twice. Its transform
// (trimNode) keeps of each Node its identity, addresses and pod CIDRs.
type ClusterNodes struct {
	informer cache.SharedIndexInformer
	run      sync.Once
}

// NewClusterNodes returns the informer, not running yet: each watcher
// registers its handler (StartOn), then the caller starts it (Start).
func NewClusterNodes(client kubernetes.Interface, resync time.Duration) (*ClusterNodes, error) {
	return newClusterNodes(client, resync, ReconnectBackoff)
}

func newClusterNodes(client kubernetes.Interface, resync time.Duration, reconnect wait.Backoff) (*ClusterNodes, error) {
	noTweak := func(*metav1.ListOptions) {}
	informer := newInformer(listWatch[*v1.NodeList](client.CoreV1().Nodes(), noTweak),
		client, &v1.Node{}, "nodes", resync, reconnect)
	if err := informer.SetTransform(trimNode); err != nil {
		return nil, err
	}
	return &ClusterNodes{informer: informer}, nil
}

// Start runs the informer until ctx ends (once, however often it is
// called). The watchers register their handlers before: one registered
// on a running informer could be handed Nodes before it knows its own
// registration.
func (n *ClusterNodes) Start(ctx context.Context) {
	n.run.Do(func() { go n.informer.RunWithContext(ctx) })
}

// sameAddrs says whether a Node update leaves what the store keeps of it
// unchanged: a Node's status changes every few minutes, its addresses and
// pod CIDRs almost never.
func sameAddrs(old, new any) bool {
	o, ok1 := old.(*v1.Node)
	n, ok2 := new.(*v1.Node)
	return ok1 && ok2 && o.UID == n.UID && slices.Equal(o.Status.Addresses, n.Status.Addresses) &&
		slices.Equal(o.Spec.PodCIDRs, n.Spec.PodCIDRs)
}
