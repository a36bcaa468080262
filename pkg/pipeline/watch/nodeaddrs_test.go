package watch

import (
	"context"
	"fmt"
	"net/netip"
	"sync/atomic"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
)

func nodeWithIPs(name string, internal ...string) *v1.Node {
	return testNode(name, func(n *v1.Node) {
		n.Status.Addresses = []v1.NodeAddress{{Type: v1.NodeHostName, Address: name}, {Type: v1.NodeExternalIP, Address: "203.0.113.9"}}
		for _, a := range internal {
			n.Status.Addresses = append(n.Status.Addresses, v1.NodeAddress{Type: v1.NodeInternalIP, Address: a})
		}
	})
}

// The watcher reports the union of every Node's addresses, taken as each
// proxy takes its own Node's, as Nodes come and go and change addresses;
// a status update that leaves the addresses alone reports nothing.
func TestNodeAddressesFollowNodes(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	client := fake.NewClientset(nodeWithIPs("a", "192.0.2.5", "192.0.2.6", "2001:db8::5"))
	got := make(chan []netip.Addr, 16)
	w := NewNodeAddresses(client, 0, func(a []netip.Addr) { got <- a })
	if err := w.Start(ctx); err != nil {
		t.Fatal(err)
	}
	expect := func(want ...string) {
		t.Helper()
		select {
		case a := <-got:
			if s, w := fmt.Sprint(a), fmt.Sprint(ips(want...)); s != w {
				t.Fatalf("node addresses %s, want %s", s, w)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("no update, want %v", want)
		}
	}
	// Node a's second IPv4 InternalIP is not what its proxy takes as its own.
	expect("192.0.2.5", "2001:db8::5")
	if !w.WaitForInitialList(ctx, 10*time.Second) {
		t.Fatal("the initial list was not handled")
	}
	api := client.CoreV1().Nodes()
	if _, err := api.Create(ctx, nodeWithIPs("b", "192.0.2.7"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	expect("192.0.2.5", "192.0.2.7", "2001:db8::5")

	b := nodeWithIPs("b", "192.0.2.7")
	b.Status.Conditions = []v1.NodeCondition{{Type: v1.NodeReady, Status: v1.ConditionTrue}}
	if _, err := api.Update(ctx, b, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	b = nodeWithIPs("b", "192.0.2.8")
	if _, err := api.Update(ctx, b, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	expect("192.0.2.5", "192.0.2.8", "2001:db8::5") // the condition update reported nothing
	if err := api.Delete(ctx, "a", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	expect("192.0.2.8")
	select {
	case a := <-got:
		t.Errorf("unexpected update %v", a)
	case <-time.After(100 * time.Millisecond):
	}
}

// The initial list is computed and reported once, whole, not at each
// Node: the union over every Node held, at each of n Nodes, cost O(n²)
// at start.
func TestNodeAddressesInitialListComputedOnce(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	client := fake.NewClientset()
	for i := range 50 {
		if _, err := client.CoreV1().Nodes().Create(ctx, nodeWithIPs(fmt.Sprint("n", i), fmt.Sprintf("192.0.2.%d", i)), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	reports := make(chan []netip.Addr, 100)
	w := NewNodeAddresses(client, 0, func(a []netip.Addr) { reports <- a })
	var computed atomic.Int32
	of := w.of
	w.of = func(objs []any) []netip.Addr { computed.Add(1); return of(objs) }
	if err := w.Start(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case a := <-reports:
		if len(a) != 50 {
			t.Errorf("first report holds %d addresses, want all 50", len(a))
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no report")
	}
	time.Sleep(100 * time.Millisecond) // any further work would be done now
	if n := computed.Load(); n != 1 || len(reports) != 0 {
		t.Errorf("the union was computed %d times and reported %d more times for the initial list, want once", n, len(reports))
	}
}

// The store keeps of a Node only its identity, its internal and external
// addresses and its pod CIDRs, not its images, conditions, labels or the
// rest of its status.
func TestTrimNodeKeepsOnlyAddresses(t *testing.T) {
	node := nodeWithIPs("a", "192.0.2.5", "192.0.2.6")
	node.ResourceVersion = "42"
	node.Spec.PodCIDRs = []string{"10.244.1.0/24"}
	node.Spec.ProviderID = "cloud://a"
	node.Status.Images = []v1.ContainerImage{{Names: []string{"registry.example/big:1"}, SizeBytes: 1 << 30}}
	node.Status.Conditions = []v1.NodeCondition{{Type: v1.NodeReady, Status: v1.ConditionTrue}}
	obj, err := trimNode(node)
	if err != nil {
		t.Fatal(err)
	}
	want := &v1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: "a", ResourceVersion: "42"},
		Spec:       v1.NodeSpec{PodCIDRs: []string{"10.244.1.0/24"}},
		Status: v1.NodeStatus{Addresses: []v1.NodeAddress{{Type: v1.NodeInternalIP, Address: "192.0.2.5"},
			{Type: v1.NodeExternalIP, Address: "203.0.113.9"}, {Type: v1.NodeExternalIP, Address: "192.0.2.6"}}},
	}
	if got := obj.(*v1.Node); fmt.Sprintf("%+v", got) != fmt.Sprintf("%+v", want) {
		t.Errorf("trimmed to\n%+v\nwant\n%+v", got, want)
	}
	if got := NodeAddressesOf([]any{obj, node, "not a Node"}); fmt.Sprint(got) != "[192.0.2.5]" {
		t.Errorf("NodeAddressesOf = %v, want [192.0.2.5] (a trimmed Node counts as the whole)", got)
	}
}

// A Node listing many addresses keeps its node IPs, whichever type and
// place they have, and a bounded number of the others.
func TestTrimNodeBoundsAddresses(t *testing.T) {
	node := testNode("many", func(n *v1.Node) {
		n.Status.Addresses = nil
		for i := range 40 {
			n.Status.Addresses = append(n.Status.Addresses, v1.NodeAddress{Type: v1.NodeExternalIP, Address: fmt.Sprintf("198.51.100.%d", i)})
		}
		n.Status.Addresses = append(n.Status.Addresses, v1.NodeAddress{Type: v1.NodeInternalIP, Address: "2001:db8::7"},
			v1.NodeAddress{Type: v1.NodeInternalIP, Address: "192.0.2.7"})
		n.Spec.PodCIDRs = []string{"10.244.7.0/24", "fd00:10::/64", "10.99.0.0/16"}
	})
	obj, err := trimNode(node)
	if err != nil {
		t.Fatal(err)
	}
	trimmed := obj.(*v1.Node)
	if got, want := fmt.Sprint(nodeIPs(trimmed)), fmt.Sprint(nodeIPs(node)); got != want || want != "[2001:db8::7 192.0.2.7]" {
		t.Errorf("node IPs of the trimmed Node %s, of the whole %s, want [2001:db8::7 192.0.2.7]", got, want)
	}
	if n := len(trimmed.Status.Addresses); n != 2+maxOtherNodeAddrs {
		t.Errorf("%d addresses kept, want the 2 node IPs and %d others", n, maxOtherNodeAddrs)
	}
	if got := fmt.Sprint(trimmed.Spec.PodCIDRs); got != "[10.244.7.0/24 fd00:10::/64]" {
		t.Errorf("pod CIDRs kept %s, want the first two", got)
	}
}

func ips(ss ...string) []netip.Addr {
	out := []netip.Addr{}
	for _, s := range ss {
		out = append(out, netip.MustParseAddr(s))
	}
	return out
}
