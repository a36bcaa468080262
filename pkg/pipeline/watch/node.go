package watch

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	"github.com/svcproxy/svcproxy/pkg/proxy"
)

const (
	// LabelZone is the topology label whose changes are forwarded.
	LabelZone = v1.LabelTopologyZone
	// TaintToBeDeleted marks a node the cluster autoscaler is removing;
	// /healthz then fails so that load balancers drain it (KEP-3836).
	TaintToBeDeleted = "ToBeDeletedByClusterAutoscaler"
)

// ErrNodeChanged is wrapped by every fatal node change.
var ErrNodeChanged = errors.New("node changed in a way that requires a restart")

// NodeInfo is what the proxy uses from its own Node object.
type NodeInfo struct {
	Name string
	// UID tells this Node from an earlier one of the name: what the node
	// writes about itself (its DSR Lease) names its owner by it.
	UID types.UID
	// IPs are InternalIP, else ExternalIP addresses: the first one, then the
	// first of the other family, as upstream's GetNodeHostIPs.
	IPs      []netip.Addr
	PodCIDRs []netip.Prefix
	Zone     string
	// Eligible is false when the node is being deleted or drained.
	Eligible bool
}

// NodeInfoOf extracts NodeInfo from node. Unparsable addresses and CIDRs are
// skipped.
func NodeInfoOf(node *v1.Node) NodeInfo {
	info := NodeInfo{
		Name:     node.Name,
		UID:      node.UID,
		IPs:      nodeIPs(node),
		Zone:     node.Labels[LabelZone],
		Eligible: Eligible(node),
	}
	for _, s := range node.Spec.PodCIDRs {
		if p, err := netip.ParsePrefix(s); err == nil {
			info.PodCIDRs = append(info.PodCIDRs, p.Masked())
		}
	}
	return info
}

func nodeIPs(node *v1.Node) []netip.Addr {
	var all []netip.Addr
	for _, kind := range []v1.NodeAddressType{v1.NodeInternalIP, v1.NodeExternalIP} {
		for _, a := range node.Status.Addresses {
			if a.Type != kind {
				continue
			}
			if ip, err := netip.ParseAddr(a.Address); err == nil {
				all = append(all, ip.Unmap())
			}
		}
	}
	if len(all) == 0 {
		return nil
	}
	ips := []netip.Addr{all[0]}
	primary := proxy.FamilyOf(all[0])
	for _, ip := range all[1:] {
		if proxy.FamilyOf(ip) != primary {
			return append(ips, ip)
		}
	}
	return ips
}

// Eligible reports whether node may receive load-balancer traffic: it is not
// being deleted and not tainted for removal by the cluster autoscaler.
func Eligible(node *v1.Node) bool {
	if node == nil || node.DeletionTimestamp != nil {
		return false
	}
	for _, t := range node.Spec.Taints {
		if t.Key == TaintToBeDeleted {
			return false
		}
	}
	return true
}

// NodeHandler receives the changes of the own Node that matter. Any field
// may be nil.
type NodeHandler struct {
	// Fatal is called once, when node IPs change, podCIDRs change (if they
	// are needed) or the Node is deleted; the app should exit with code 1.
	Fatal func(err error)
	// ZoneChanged is called when the zone label changes.
	ZoneChanged func(zone string)
	// EligibilityChanged is called when /healthz eligibility changes.
	EligibilityChanged func(eligible bool)
}

// NodeWatcher waits for and then watches the Node this proxy runs on.
type NodeWatcher struct {
	client kubernetes.Interface
	name   string
	resync time.Duration
	// pollInterval is how often WaitForNode looks; a field so tests are fast.
	pollInterval time.Duration
	// reconnect is how the watch retries an unreachable API server.
	reconnect wait.Backoff
}

// NewNodeWatcher returns a watcher of the Node called name.
func NewNodeWatcher(client kubernetes.Interface, name string, resync time.Duration) *NodeWatcher {
	return &NodeWatcher{client: client, name: name, resync: resync, pollInterval: time.Second, reconnect: ReconnectBackoff}
}

// WaitForNode polls every second, up to timeout, until the Node exists and
// has IPs and, if needPodCIDRs, podCIDRs.
func (w *NodeWatcher) WaitForNode(ctx context.Context, timeout time.Duration, needPodCIDRs bool) (NodeInfo, error) {
	var info NodeInfo
	var lastProblem error
	err := wait.PollUntilContextTimeout(ctx, w.pollInterval, timeout, true, func(ctx context.Context) (bool, error) {
		node, err := w.client.CoreV1().Nodes().Get(ctx, w.name, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			lastProblem = fmt.Errorf("node %q not found", w.name)
		case err != nil:
			lastProblem = fmt.Errorf("getting node %q: %w", w.name, err)
		default:
			info = NodeInfoOf(node)
			lastProblem = readiness(info, needPodCIDRs)
		}
		if lastProblem != nil {
			klog.V(2).InfoS("Waiting for own Node", "node", w.name, "reason", lastProblem)
		}
		return lastProblem == nil, nil
	})
	if err != nil {
		return NodeInfo{}, fmt.Errorf("waiting for node %q: %w (last: %w)", w.name, err, lastProblem)
	}
	return info, nil
}

func readiness(info NodeInfo, needPodCIDRs bool) error {
	if len(info.IPs) == 0 {
		return fmt.Errorf("node %q has no InternalIP or ExternalIP", info.Name)
	}
	if needPodCIDRs && len(info.PodCIDRs) == 0 {
		return fmt.Errorf("node %q has no podCIDRs", info.Name)
	}
	return nil
}

// Start watches the Node until ctx is done, comparing it with initial (what
// WaitForNode returned) and reporting to h. It returns once the watch has
// seen the current Node, so later changes are not missed.
func (w *NodeWatcher) Start(ctx context.Context, initial NodeInfo, needPodCIDRs bool, h NodeHandler) error {
	tweak := func(o *metav1.ListOptions) {
		o.FieldSelector = fields.OneTermEqualSelector("metadata.name", w.name).String()
	}
	factory := informers.NewSharedInformerFactory(w.client, w.resync)
	informer := factory.InformerFor(&v1.Node{}, func(c kubernetes.Interface, resync time.Duration) cache.SharedIndexInformer {
		return newInformer(listWatch[*v1.NodeList](c.CoreV1().Nodes(), tweak), c, &v1.Node{}, "nodes", resync, w.reconnect)
	})
	tracker := &nodeTracker{
		name: w.name, initial: initial, needPodCIDRs: needPodCIDRs, handler: h,
		zone: initial.Zone, eligible: initial.Eligible,
	}
	_, err := informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { tracker.onNode(obj) },
		UpdateFunc: func(_, obj any) { tracker.onNode(obj) },
		DeleteFunc: tracker.onDelete,
	})
	if err != nil {
		return fmt.Errorf("registering Node handler: %w", err)
	}
	factory.Start(ctx.Done())
	for typ, ok := range factory.WaitForCacheSync(ctx.Done()) {
		if !ok {
			return fmt.Errorf("syncing %v cache of node %q: %w", typ, w.name, context.Cause(ctx))
		}
	}
	return nil
}

// nodeTracker compares each version of the Node with what came before.
type nodeTracker struct {
	name         string
	initial      NodeInfo
	needPodCIDRs bool
	handler      NodeHandler

	mu        sync.Mutex
	zone      string
	eligible  bool
	fatalOnce sync.Once
}

func (t *nodeTracker) onNode(obj any) {
	node, ok := obj.(*v1.Node)
	if !ok || node.Name != t.name { // fakes ignore field selectors
		return
	}
	info := NodeInfoOf(node)
	if !slices.Equal(info.IPs, t.initial.IPs) {
		t.fatal(fmt.Errorf("%w: node IPs changed from %v to %v", ErrNodeChanged, t.initial.IPs, info.IPs))
	}
	if t.needPodCIDRs && !slices.Equal(info.PodCIDRs, t.initial.PodCIDRs) {
		t.fatal(fmt.Errorf("%w: podCIDRs changed from %v to %v", ErrNodeChanged, t.initial.PodCIDRs, info.PodCIDRs))
	}
	t.mu.Lock()
	zoneChanged := info.Zone != t.zone
	eligibilityChanged := info.Eligible != t.eligible
	t.zone, t.eligible = info.Zone, info.Eligible
	t.mu.Unlock()
	if zoneChanged && t.handler.ZoneChanged != nil {
		t.handler.ZoneChanged(info.Zone)
	}
	if eligibilityChanged && t.handler.EligibilityChanged != nil {
		t.handler.EligibilityChanged(info.Eligible)
	}
}

func (t *nodeTracker) onDelete(obj any) {
	node, ok := unwrap[*v1.Node](obj)
	if !ok || node == nil || node.Name != t.name {
		return
	}
	t.mu.Lock()
	wasEligible := t.eligible
	t.eligible = false
	t.mu.Unlock()
	if wasEligible && t.handler.EligibilityChanged != nil {
		t.handler.EligibilityChanged(false)
	}
	t.fatal(fmt.Errorf("%w: node %q was deleted", ErrNodeChanged, t.name))
}

func (t *nodeTracker) fatal(err error) {
	t.fatalOnce.Do(func() {
		klog.ErrorS(err, "Own Node changed", "node", t.name)
		if t.handler.Fatal != nil {
			t.handler.Fatal(err)
		}
	})
}

// unwrap returns obj as a T, looking inside a delete tombstone (the informer
// missed the deletion and only knows the last state). A nil obj is a nil T.
// ok is false for anything else.
func unwrap[T any](obj any) (v T, ok bool) {
	if obj == nil {
		return v, true
	}
	if tomb, isTomb := obj.(cache.DeletedFinalStateUnknown); isTomb {
		obj = tomb.Obj
	}
	v, ok = obj.(T)
	return v, ok
}
