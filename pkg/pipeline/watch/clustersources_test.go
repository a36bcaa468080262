package watch

import (
	"context"
	"net/netip"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
)

// The watcher reports every Node's internal and external addresses and
// pod CIDRs, sharing the Nodes' informer with another watcher, as Nodes
// come, change pod CIDRs and go; a status update that changes neither
// reports nothing.
func TestClusterSourcesFollowNodes(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	a := nodeWithIPs("a", "192.0.2.5", "192.0.2.6", "2001:db8::5")
	a.Spec.PodCIDRs = []string{"10.244.0.0/24", "fd00:10::/64"}
	client := fake.NewClientset(a)
	nodes, err := NewClusterNodes(client, 0)
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan []netip.Prefix, 16)
	w := NewClusterSources(client, 0, func(p []netip.Prefix) { got <- p })
	addrs := NewNodeAddresses(client, 0, func([]netip.Addr) {})
	if err := w.StartOn(ctx, nodes); err != nil {
		t.Fatal(err)
	}
	if err := addrs.StartOn(ctx, nodes); err != nil {
		t.Fatal(err)
	}
	nodes.Start(ctx)
	expect := func(want string) {
		t.Helper()
		expectNext(t, got, "cluster sources", want)
	}
	expect("[10.244.0.0/24 192.0.2.5/32 192.0.2.6/32 203.0.113.9/32 2001:db8::5/128 fd00:10::/64]")
	if !w.WaitForInitialList(ctx, 10*time.Second) {
		t.Fatal("the initial list was not handled")
	}
	api := client.CoreV1().Nodes()
	b := nodeWithIPs("b", "192.0.2.7")
	if _, err := api.Create(ctx, b, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	expect("[10.0.1.0/24 10.244.0.0/24 192.0.2.5/32 192.0.2.6/32 192.0.2.7/32 203.0.113.9/32 2001:db8::5/128 fd00:10::/64]")
	b.Status.Conditions = []v1.NodeCondition{{Type: v1.NodeReady, Status: v1.ConditionTrue}}
	if _, err := api.Update(ctx, b, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	b.Spec.PodCIDRs = []string{"10.244.1.7/24"}
	if _, err := api.Update(ctx, b, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	// The condition update reported nothing; the pod CIDR comes masked.
	expect("[10.244.0.0/24 10.244.1.0/24 192.0.2.5/32 192.0.2.6/32 192.0.2.7/32 203.0.113.9/32 2001:db8::5/128 fd00:10::/64]")
	if err := api.Delete(ctx, "a", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	expect("[10.244.1.0/24 192.0.2.7/32 203.0.113.9/32]")
	select {
	case p := <-got:
		t.Errorf("unexpected update %v", p)
	case <-time.After(100 * time.Millisecond):
	}
}
