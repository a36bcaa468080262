package watch

import (
	"context"
	"fmt"
	"net/netip"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
)

const dsrNamespace = "svcproxy-dsr"

// peerNode is a Node with a UID, InternalIPs of both families and an
// ExternalIP that no proxy takes.
func peerNode(name string, internal ...string) *v1.Node {
	n := nodeWithIPs(name, internal...)
	n.UID = types.UID("uid-" + name)
	return n
}

// dsrLease is node's advertisement as a node writes it: named after the
// node, held by holder, owned by the Node of UID uid.
func dsrLease(node, holder string, uid types.UID) *coordinationv1.Lease {
	l := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: node, Namespace: dsrNamespace,
		OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "Node", Name: node, UID: uid}}}}
	if holder != "" {
		l.Spec.HolderIdentity = &holder
	}
	return l
}

// TestPeersOf: a node is a peer when its Lease exists, is held by its
// name and owned by its Node as it is now, and it is not this node; its
// addresses are its Node's status ones, whatever the Lease says.
func TestPeersOf(t *testing.T) {
	lying := dsrLease("b", "b", "uid-b")
	lying.Annotations = map[string]string{"address": "198.51.100.66"}
	lying.Labels = map[string]string{"address": "198.51.100.66"}
	noAddr := peerNode("noaddr")
	noAddr.Status.Addresses = []v1.NodeAddress{{Type: v1.NodeHostName, Address: "noaddr"}}
	nodes := []any{peerNode("a", "192.0.2.1"), peerNode("b", "192.0.2.2", "2001:db8::2"), peerNode("c", "192.0.2.3"),
		peerNode("d", "192.0.2.4"), peerNode("e", "192.0.2.5"), peerNode("self", "192.0.2.9"), noAddr}
	leases := []any{
		dsrLease("c", "c", "uid-c"),
		lying,
		dsrLease("a", "a", "uid-a"),
		dsrLease("d", "a", "uid-d"),         // held by another node
		dsrLease("e", "e", "uid-e-earlier"), // an earlier Node e's
		dsrLease("ghost", "ghost", "uid-ghost"),
		dsrLease("self", "self", "uid-self"),
		dsrLease("noaddr", "noaddr", "uid-noaddr"),
		&coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "a"}}, // no holder, no owner
		"not a Lease",
	}
	got := PeersOf("self", nodes, leases)
	want := "[{a [192.0.2.1]} {b [192.0.2.2 2001:db8::2]} {c [192.0.2.3]}]"
	if fmt.Sprint(got) != want {
		t.Errorf("peers %v, want %v", got, want)
	}
	if got := PeersOf("self", nil, nil); got == nil || len(got) != 0 {
		t.Errorf("no objects: %#v, want an empty list", got)
	}
	// Trimmed, the objects make the same peers.
	var trimmedNodes, trimmedLeases []any
	for _, n := range nodes {
		tn, _ := trimNode(n)
		trimmedNodes = append(trimmedNodes, tn)
	}
	for _, l := range leases {
		tl, _ := trimLease(l)
		trimmedLeases = append(trimmedLeases, tl)
	}
	if got := PeersOf("self", trimmedNodes, trimmedLeases); fmt.Sprint(got) != want {
		t.Errorf("trimmed: peers %v, want %v", got, want)
	}
}

// TestTrimLeaseKeepsIdentityHolderOwners: the store keeps of a Lease what
// the join and the expiry read, and not the rest of its spec, labels or
// annotations.
func TestTrimLeaseKeepsIdentityHolderOwners(t *testing.T) {
	renew := time.Unix(1700000030, 0)
	l := renewedLease("b", renew, 90)
	l.ResourceVersion, l.UID = "7", "lease-uid"
	l.Labels = map[string]string{"x": "y"}
	now := metav1.NewMicroTime(time.Unix(1700000000, 0))
	l.Spec.AcquireTime = &now
	obj, err := trimLease(l)
	if err != nil {
		t.Fatal(err)
	}
	want := renewedLease("b", renew, 90)
	want.ResourceVersion, want.UID = "7", "lease-uid"
	if got := obj.(*coordinationv1.Lease); fmt.Sprintf("%+v", got) != fmt.Sprintf("%+v", want) {
		t.Errorf("trimmed to\n%+v\nwant\n%+v", got, want)
	}
}

// TestPeersFollowLeasesAndNodes: the watcher reports the peers of the
// initial lists once, then again after a Lease or a Node change that
// changes them: a Lease appearing, its Node's addresses changing, the
// Node going, the Lease going. A Node status update that leaves the
// addresses alone reports nothing. It shares the Node informer with the
// Node addresses' watch.
func TestPeersFollowLeasesAndNodes(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	client := fake.NewClientset(peerNode("self", "192.0.2.9"), peerNode("a", "192.0.2.1"), peerNode("b", "192.0.2.2"),
		dsrLease("a", "a", "uid-a"), dsrLease("self", "self", "uid-self"))
	leasesOpen := watchOpened(client, "leases")
	nodesOpen := watchOpened(client, "nodes")
	nodes, err := NewClusterNodes(client, 0)
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan []Peer, 16)
	w := NewPeers(client, 0, dsrNamespace, "self", func(p []Peer) { got <- p })
	if err := w.StartOn(ctx, nodes); err != nil {
		t.Fatal(err)
	}
	addrs := make(chan int, 16)
	if err := NewNodeAddresses(client, 0, func(a []netip.Addr) { addrs <- len(a) }).StartOn(ctx, nodes); err != nil {
		t.Fatal(err)
	}
	nodes.Start(ctx)
	expect := func(want string) {
		t.Helper()
		expectNext(t, got, "peers", want)
	}
	expect("[{a [192.0.2.1]}]")
	if !w.WaitForInitialList(ctx, 10*time.Second) {
		t.Fatal("the initial lists were not handled")
	}
	select {
	case n := <-addrs:
		if n != 3 {
			t.Errorf("the shared informer gave the address watch %d addresses, want 3", n)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the address watch on the shared informer reported nothing")
	}
	leasesOpen(t)
	nodesOpen(t)
	leases := client.CoordinationV1().Leases(dsrNamespace)
	if _, err := leases.Create(ctx, dsrLease("b", "b", "uid-b"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	expect("[{a [192.0.2.1]} {b [192.0.2.2]}]")
	api := client.CoreV1().Nodes()
	b := peerNode("b", "192.0.2.2")
	b.Status.Conditions = []v1.NodeCondition{{Type: v1.NodeReady, Status: v1.ConditionTrue}}
	if _, err := api.Update(ctx, b, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := api.Update(ctx, peerNode("b", "192.0.2.22"), metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	expect("[{a [192.0.2.1]} {b [192.0.2.22]}]") // the condition update reported nothing
	if err := api.Delete(ctx, "a", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	expect("[{b [192.0.2.22]}]")
	if err := leases.Delete(ctx, "b", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	expect("[]")
	select {
	case p := <-got:
		t.Errorf("unexpected update %v", p)
	case <-time.After(100 * time.Millisecond):
	}
}

// expectNext waits for the next value of got and fails unless it prints
// as want; what names the values in messages.
func expectNext[T any](t *testing.T, got <-chan T, what, want string) {
	t.Helper()
	select {
	case v := <-got:
		if s := fmt.Sprint(v); s != want {
			t.Fatalf("%s %s, want %s", what, s, want)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("no update, want %s", want)
	}
}
