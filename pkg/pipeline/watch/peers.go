package watch

import (
	"context"
	"math"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
)

// Peer is another node that decapsulates direct-server-return tunnels.
// IPs are its Node's status addresses, as NodeInfoOf takes a node's own
// (primary first, then the other family's); never the Lease's word.
type Peer struct {
	Name string
	IPs  []netip.Addr
}

// Peers watches the nodes' DSR Leases in one namespace beside every Node
// (ClusterNodes), and reports the peers, sorted by name, whenever they
// change. A node advertises with a Lease named after it, held by it, and
// owned by its Node (so that it goes with the Node); the Lease only says
// that the node decapsulates, never where to: a node cannot point other
// nodes' traffic elsewhere. It is written when a node starts advertising,
// renewed while it does, and deleted when it stops; one whose renewal is
// overdue (leaseObservations) no longer counts, without any event: a
// timer re-checks at the earliest expiry.
type Peers struct {
	client    kubernetes.Interface
	resync    time.Duration
	reconnect wait.Backoff
	namespace string
	self      string
	changed   func([]Peer)
	clock     clock.WithDelayedExecution

	// mu serializes updates: a late one must not report older peers.
	mu       sync.Mutex
	last     []Peer
	observed leaseObservations
	// recheck updates from the stores; expiry runs it at the earliest
	// expiry of a counted Lease. stopped is set once ctx ended.
	recheck func()
	expiry  clock.Timer
	stopped bool
	// handled reports whether both handlers have seen their initial
	// lists; nil before start. reported is set once those were reported.
	handled  func() bool
	reported atomic.Bool
}

// NewPeers returns a watcher of the Leases in namespace that calls
// changed (from an informer's goroutine) with the peers of node self
// after every change of them.
func NewPeers(client kubernetes.Interface, resync time.Duration, namespace, self string, changed func([]Peer)) *Peers {
	return &Peers{client: client, resync: resync, reconnect: ReconnectBackoff, namespace: namespace, self: self, changed: changed,
		clock: clock.RealClock{}}
}

// StartOn runs the Lease informer until ctx ends, and registers the
// watch on nodes (shared with other watchers), which the caller starts.
func (w *Peers) StartOn(ctx context.Context, nodes *ClusterNodes) error {
	tweak := func(*metav1.ListOptions) {}
	leases := newInformer(listWatch[*coordinationv1.LeaseList](w.client.CoordinationV1().Leases(w.namespace), tweak),
		w.client, &coordinationv1.Lease{}, "leases", w.resync, w.reconnect)
	if err := leases.SetTransform(trimLease); err != nil {
		return err
	}
	listNodes, listLeases := nodes.informer.GetStore().List, leases.GetStore().List
	update := func() { w.update(listNodes, listLeases) }
	w.recheck = update
	nodesReg, err := nodes.informer.AddEventHandler(w.handler(update, sameAddrs))
	if err != nil {
		return err
	}
	leasesReg, err := leases.AddEventHandler(w.handler(update, nil))
	if err != nil {
		return err
	}
	w.handled = func() bool { return nodesReg.HasSynced() && leasesReg.HasSynced() }
	go func() {
		if pollUntil(ctx, time.Duration(math.MaxInt64), w.handled) {
			update()
			w.reported.Store(true)
		}
	}()
	go leases.RunWithContext(ctx)
	go func() {
		<-ctx.Done()
		w.stopExpiry()
	}()
	return nil
}

// handler recomputes the peers at every change once the initial lists
// have been handled (they are computed once, whole, then); updates for
// which same holds are not looked at.
func (w *Peers) handler(update func(), same func(old, new any) bool) cache.ResourceEventHandler {
	changed := func(any) {
		if w.handled() {
			update()
		}
	}
	return cache.ResourceEventHandlerFuncs{
		AddFunc: changed,
		UpdateFunc: func(old, obj any) {
			if same == nil || !same(old, obj) {
				changed(obj)
			}
		},
		DeleteFunc: changed,
	}
}

// WaitForInitialList blocks until the peers of the initial lists (none
// too) have been reported, for at most timeout, and reports whether they
// have.
func (w *Peers) WaitForInitialList(ctx context.Context, timeout time.Duration) bool {
	if w.handled == nil {
		return false
	}
	return pollUntil(ctx, timeout, w.reported.Load)
}

// update reports the peers the stores hold now, if they changed; listing
// under the lock keeps a concurrent update from reporting older ones.
// Leases whose renewal is overdue do not count.
func (w *Peers) update(nodes, leases func() []any) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.stopped {
		return
	}
	now := w.clock.Now()
	live, next := w.observed.live(leases(), now)
	w.armExpiry(next, now)
	peers := PeersOf(w.self, nodes(), live)
	if w.last != nil && slices.EqualFunc(peers, w.last, Peer.equal) {
		return
	}
	w.last = peers
	klog.V(2).InfoS("DSR peers changed", "count", len(peers))
	w.changed(peers)
}

// armExpiry has the peers updated at next, when a counted Lease expires
// (never, if next is zero), instead of at any earlier time it was armed
// for. w.mu is held.
func (w *Peers) armExpiry(next, now time.Time) {
	if w.expiry != nil {
		w.expiry.Stop()
		w.expiry = nil
	}
	if !next.IsZero() && !w.stopped {
		// In a goroutine of its own: a clock may run its timers' functions
		// while it holds its own lock, which update's Now would wait for.
		recheck := w.recheck
		w.expiry = w.clock.AfterFunc(next.Sub(now), func() { go recheck() })
	}
}

// stopExpiry stops re-checking once the watch ends.
func (w *Peers) stopExpiry() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.stopped = true
	w.armExpiry(time.Time{}, time.Time{})
}

func (p Peer) equal(o Peer) bool { return p.Name == o.Name && slices.Equal(p.IPs, o.IPs) }

// PeersOf joins Leases and Nodes (either whole or as the informers trim
// them) into the peers of node self, sorted by name, never nil. A Lease
// makes its node a peer when it is named after a Node that exists, is held
// by that name, and is owned by that Node (its UID: a Lease of an earlier
// Node of the name does not count), and that node is not self and has an
// address.
func PeersOf(self string, nodes, leases []any) []Peer {
	byName := make(map[string]*v1.Node, len(nodes))
	for _, obj := range nodes {
		if n, ok := obj.(*v1.Node); ok {
			byName[n.Name] = n
		}
	}
	out := []Peer{}
	for _, obj := range leases {
		l, ok := obj.(*coordinationv1.Lease)
		if !ok || l.Name == self || l.Spec.HolderIdentity == nil || *l.Spec.HolderIdentity != l.Name {
			continue
		}
		node := byName[l.Name]
		if node == nil || !ownedBy(l, node) {
			continue
		}
		if ips := nodeIPs(node); len(ips) > 0 {
			out = append(out, Peer{Name: node.Name, IPs: ips})
		}
	}
	slices.SortFunc(out, func(a, b Peer) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// ownedBy says whether one of l's owners is node, by UID.
func ownedBy(l *coordinationv1.Lease, node *v1.Node) bool {
	for _, o := range l.OwnerReferences {
		if o.Kind == "Node" && o.Name == node.Name && o.UID == node.UID {
			return true
		}
	}
	return false
}

// trimLease is the Lease informer's transform: a Lease becomes its
// identity, its owners, its holder, its renew time and its duration;
// anything else passes unchanged.
func trimLease(obj any) (any, error) {
	l, ok := obj.(*coordinationv1.Lease)
	if !ok {
		return obj, nil
	}
	out := &coordinationv1.Lease{ObjectMeta: identity(&l.ObjectMeta)}
	out.OwnerReferences = l.OwnerReferences
	out.Spec.HolderIdentity = l.Spec.HolderIdentity
	out.Spec.RenewTime, out.Spec.LeaseDurationSeconds = l.Spec.RenewTime, l.Spec.LeaseDurationSeconds
	return out, nil
}
