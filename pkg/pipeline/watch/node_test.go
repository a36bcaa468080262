package watch

import (
	"context"
	"errors"
	"net/netip"
	"slices"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
)

func testNode(name string, tweak func(*v1.Node)) *v1.Node {
	n := &v1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{LabelZone: "zone-a"}},
		Spec:       v1.NodeSpec{PodCIDRs: []string{"10.0.1.0/24"}},
		Status: v1.NodeStatus{Addresses: []v1.NodeAddress{
			{Type: v1.NodeHostName, Address: "node-a"},
			{Type: v1.NodeExternalIP, Address: "203.0.113.5"},
			{Type: v1.NodeInternalIP, Address: "192.0.2.5"},
			{Type: v1.NodeInternalIP, Address: "192.0.2.6"},
			{Type: v1.NodeInternalIP, Address: "2001:db8::5"},
		}},
	}
	if tweak != nil {
		tweak(n)
	}
	return n
}

func TestNodeInfoOf(t *testing.T) {
	info := NodeInfoOf(testNode("node-a", nil))
	wantIPs := []netip.Addr{netip.MustParseAddr("192.0.2.5"), netip.MustParseAddr("2001:db8::5")}
	if !slices.Equal(info.IPs, wantIPs) || info.Zone != "zone-a" || !info.Eligible ||
		!slices.Equal(info.PodCIDRs, []netip.Prefix{netip.MustParsePrefix("10.0.1.0/24")}) {
		t.Fatalf("got %+v", info)
	}
	external := NodeInfoOf(testNode("node-a", func(n *v1.Node) {
		n.Status.Addresses = []v1.NodeAddress{{Type: v1.NodeExternalIP, Address: "203.0.113.5"}}
	}))
	if !slices.Equal(external.IPs, []netip.Addr{netip.MustParseAddr("203.0.113.5")}) {
		t.Fatalf("ExternalIP fallback: got %v", external.IPs)
	}
}

func TestEligible(t *testing.T) {
	now := metav1.Now()
	cases := map[string]struct {
		node *v1.Node
		want bool
	}{
		"plain":    {testNode("n", nil), true},
		"missing":  {nil, false},
		"deleting": {testNode("n", func(n *v1.Node) { n.DeletionTimestamp = &now }), false},
		"autoscaler taint": {testNode("n", func(n *v1.Node) {
			n.Spec.Taints = []v1.Taint{{Key: TaintToBeDeleted, Effect: v1.TaintEffectNoSchedule}}
		}), false},
		"other taint": {testNode("n", func(n *v1.Node) {
			n.Spec.Taints = []v1.Taint{{Key: "dedicated", Effect: v1.TaintEffectNoSchedule}}
		}), true},
	}
	for name, tc := range cases {
		if got := Eligible(tc.node); got != tc.want {
			t.Errorf("%s: Eligible = %v, want %v", name, got, tc.want)
		}
	}
}

func fastWatcher(client *fake.Clientset) *NodeWatcher {
	w := NewNodeWatcher(client, "node-a", 0)
	w.pollInterval = 10 * time.Millisecond
	return w
}

func TestWaitForNodeWaitsForIPsAndPodCIDRs(t *testing.T) {
	client := fake.NewClientset()
	w := fastWatcher(client)
	ctx := context.Background()
	go func() {
		time.Sleep(30 * time.Millisecond)
		bare := testNode("node-a", func(n *v1.Node) { n.Status.Addresses = nil; n.Spec.PodCIDRs = nil })
		_, _ = client.CoreV1().Nodes().Create(ctx, bare, metav1.CreateOptions{})
		time.Sleep(30 * time.Millisecond)
		withIPs := testNode("node-a", func(n *v1.Node) { n.Spec.PodCIDRs = nil })
		_, _ = client.CoreV1().Nodes().Update(ctx, withIPs, metav1.UpdateOptions{})
		time.Sleep(30 * time.Millisecond)
		_, _ = client.CoreV1().Nodes().Update(ctx, testNode("node-a", nil), metav1.UpdateOptions{})
	}()
	info, err := w.WaitForNode(ctx, 10*time.Second, true)
	if err != nil {
		t.Fatal(err)
	}
	if len(info.IPs) != 2 || len(info.PodCIDRs) != 1 {
		t.Fatalf("returned before the node was complete: %+v", info)
	}
}

func TestWaitForNodeWithoutPodCIDRs(t *testing.T) {
	client := fake.NewClientset(testNode("node-a", func(n *v1.Node) { n.Spec.PodCIDRs = nil }))
	info, err := fastWatcher(client).WaitForNode(context.Background(), 10*time.Second, false)
	if err != nil || len(info.IPs) != 2 {
		t.Fatalf("got %+v, %v", info, err)
	}
}

func TestWaitForNodeTimesOut(t *testing.T) {
	client := fake.NewClientset(testNode("other-node", nil))
	start := time.Now()
	_, err := fastWatcher(client).WaitForNode(context.Background(), 100*time.Millisecond, false)
	if err == nil {
		t.Fatalf("WaitForNode succeeded without the node")
	}
	if elapsed := time.Since(start); elapsed > 5*time.Second {
		t.Fatalf("timeout of 100ms took %v", elapsed)
	}
}

// nodeEvents records what a NodeHandler was told.
type nodeEvents struct {
	mu          sync.Mutex
	fatal       []error
	zones       []string
	eligibility []bool
}

func (e *nodeEvents) handler() NodeHandler {
	return NodeHandler{
		Fatal:              func(err error) { e.mu.Lock(); e.fatal = append(e.fatal, err); e.mu.Unlock() },
		ZoneChanged:        func(z string) { e.mu.Lock(); e.zones = append(e.zones, z); e.mu.Unlock() },
		EligibilityChanged: func(b bool) { e.mu.Lock(); e.eligibility = append(e.eligibility, b); e.mu.Unlock() },
	}
}

func (e *nodeEvents) get() (fatal []error, zones []string, eligibility []bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return slices.Clone(e.fatal), slices.Clone(e.zones), slices.Clone(e.eligibility)
}

// startNodeWatch waits for node-a, starts watching it, and returns the fake
// client and the recorded events once the watch is open.
func startNodeWatch(t *testing.T, needPodCIDRs bool) (*fake.Clientset, *nodeEvents) {
	t.Helper()
	var waitWatch func(*testing.T)
	client, events := startNodeWatchWith(t, needPodCIDRs, func(client *fake.Clientset, _ *NodeWatcher) {
		waitWatch = watchOpened(client, "nodes")
	})
	waitWatch(t)
	return client, events
}

// startNodeWatchWith is startNodeWatch with prepare, when set, run on the
// client and the watcher before anything is read.
func startNodeWatchWith(t *testing.T, needPodCIDRs bool, prepare func(*fake.Clientset, *NodeWatcher)) (*fake.Clientset, *nodeEvents) {
	t.Helper()
	client := fake.NewClientset(testNode("node-a", nil))
	w := fastWatcher(client)
	if prepare != nil {
		prepare(client, w)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	info, err := w.WaitForNode(ctx, 10*time.Second, needPodCIDRs)
	if err != nil {
		t.Fatal(err)
	}
	events := &nodeEvents{}
	if err := w.Start(ctx, info, needPodCIDRs, events.handler()); err != nil {
		t.Fatal(err)
	}
	return client, events
}

func updateNode(t *testing.T, client *fake.Clientset, tweak func(*v1.Node)) {
	t.Helper()
	if _, err := client.CoreV1().Nodes().Update(context.Background(), testNode("node-a", tweak), metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

func TestNodeWatchZoneAndEligibility(t *testing.T) {
	client, events := startNodeWatch(t, false)
	// An unrelated change reports nothing; then the zone moves, then the
	// autoscaler taints the node.
	updateNode(t, client, func(n *v1.Node) { n.Labels["team"] = "x" })
	updateNode(t, client, func(n *v1.Node) { n.Labels[LabelZone] = "zone-b" })
	updateNode(t, client, func(n *v1.Node) {
		n.Labels[LabelZone] = "zone-b"
		n.Spec.Taints = []v1.Taint{{Key: TaintToBeDeleted, Effect: v1.TaintEffectNoSchedule}}
	})
	eventually(t, "eligibility change", func() bool { _, _, e := events.get(); return len(e) == 1 })
	fatal, zones, eligibility := events.get()
	if len(fatal) != 0 || !slices.Equal(zones, []string{"zone-b"}) || !slices.Equal(eligibility, []bool{false}) {
		t.Fatalf("fatal %v, zones %v, eligibility %v", fatal, zones, eligibility)
	}
}

func TestNodeWatchFatalChanges(t *testing.T) {
	cases := []struct {
		name         string
		needPodCIDRs bool
		tweak        func(*v1.Node)
		wantFatal    bool
	}{
		{"node IPs changed", false, func(n *v1.Node) { n.Status.Addresses = n.Status.Addresses[1:3] }, true},
		{"podCIDRs changed and needed", true, func(n *v1.Node) { n.Spec.PodCIDRs = []string{"10.0.2.0/24"} }, true},
		{"podCIDRs changed but not needed", false, func(n *v1.Node) { n.Spec.PodCIDRs = []string{"10.0.2.0/24"} }, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			client, events := startNodeWatch(t, tc.needPodCIDRs)
			updateNode(t, client, tc.tweak)
			// A zone change afterwards proves the watcher saw the change
			// before it, since events arrive in order.
			updateNode(t, client, func(n *v1.Node) { tc.tweak(n); n.Labels[LabelZone] = "zone-z" })
			eventually(t, "zone change", func() bool { _, z, _ := events.get(); return len(z) > 0 })
			fatal, _, _ := events.get()
			if got := len(fatal) > 0; got != tc.wantFatal {
				t.Fatalf("fatal reported = %v (%v), want %v", got, fatal, tc.wantFatal)
			}
			if len(fatal) > 1 {
				t.Fatalf("fatal must be reported once, got %v", fatal)
			}
			if tc.wantFatal && !errors.Is(fatal[0], ErrNodeChanged) {
				t.Fatalf("fatal error %v does not wrap ErrNodeChanged", fatal[0])
			}
		})
	}
}

func TestNodeWatchDeletedNode(t *testing.T) {
	client, events := startNodeWatch(t, false)
	if err := client.CoreV1().Nodes().Delete(context.Background(), "node-a", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "fatal", func() bool { f, _, _ := events.get(); return len(f) > 0 })
	fatal, _, eligibility := events.get()
	if len(fatal) != 1 || !errors.Is(fatal[0], ErrNodeChanged) {
		t.Fatalf("fatal %v, want one ErrNodeChanged", fatal)
	}
	if !slices.Equal(eligibility, []bool{false}) {
		t.Fatalf("a deleted node must become ineligible: %v", eligibility)
	}
}
