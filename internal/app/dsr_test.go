package app

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"sync"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes/fake"
	clienttesting "k8s.io/client-go/testing"
	"k8s.io/klog/v2"

	"github.com/svcproxy/svcproxy/internal/backends"
	"github.com/svcproxy/svcproxy/internal/config"
	"github.com/svcproxy/svcproxy/pkg/pipeline/model"
	"github.com/svcproxy/svcproxy/pkg/pipeline/watch"
	"github.com/svcproxy/svcproxy/pkg/proxy"
)

const testDSRNamespace = "svcproxy-dsr"

// shortDSRTimes makes the withdrawal's wait, the advertisement's retries
// and its renew period short for one test.
func shortDSRTimes(t *testing.T, withdrawWait time.Duration) {
	t.Helper()
	oldWait, oldBackoff, oldRenew := dsrWithdrawWait, dsrAdvertiseBackoff, dsrRenewPeriod
	dsrWithdrawWait = withdrawWait
	dsrAdvertiseBackoff = wait.Backoff{Duration: 5 * time.Millisecond, Factor: 1, Steps: 1 << 30}
	dsrRenewPeriod = 5 * time.Millisecond
	t.Cleanup(func() { dsrWithdrawWait, dsrAdvertiseBackoff, dsrRenewPeriod = oldWait, oldBackoff, oldRenew })
}

// dsrDaemon is a daemon of node n1 (Node UID uid-n1) over client, with
// --bpf-dsr or not.
func dsrDaemon(client *fake.Clientset, dsr bool) *daemon {
	cfg := &config.Config{Mode: proxy.ModeEBPF, BPFDSR: dsr, BPFDSRNamespace: testDSRNamespace, BPFTCInterfaces: []string{"eth0"}}
	return &daemon{cfg: cfg, client: client, nodeName: "n1", logger: klog.Background(),
		nodeInfo: watch.NodeInfo{Name: "n1", UID: "uid-n1"}}
}

func getLease(t *testing.T, client *fake.Clientset, name string) (*coordinationv1.Lease, bool) {
	t.Helper()
	l, err := client.CoordinationV1().Leases(testDSRNamespace).Get(context.Background(), name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, false
	}
	if err != nil {
		t.Fatal(err)
	}
	return l, true
}

func staleLease(name string, uid string) *coordinationv1.Lease {
	holder := name
	return &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: testDSRNamespace,
		OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "Node", Name: name, UID: types.UID("uid-" + uid)}}},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: &holder}}
}

// TestDSRAdvertisedAfterFirstSyncs: with --bpf-dsr the node's Lease is
// written once every family has synced, not before (its programs
// decapsulate from then on), named after it, held by it and owned by its
// Node; a create the API server refuses is retried.
func TestDSRAdvertisedAfterFirstSyncs(t *testing.T) {
	shortDSRTimes(t, time.Millisecond)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	client := fake.NewClientset()
	refusals := 2
	var mu sync.Mutex
	client.PrependReactor("create", "leases", func(clienttesting.Action) (bool, runtime.Object, error) {
		mu.Lock()
		defer mu.Unlock()
		if refusals > 0 {
			refusals--
			return true, nil, errors.New("the API server is away")
		}
		return false, nil, nil
	})
	d := dsrDaemon(client, true)
	first := newFirstSyncs([]proxy.IPFamily{proxy.IPv4, proxy.IPv6})
	advertising := d.advertiseDSRAfter(ctx, first.done)
	// Renewing goes on until ctx ends; it must not outlive the test's times.
	defer func() {
		cancel()
		<-advertising
	}()
	first.afterSync(proxy.IPv4)(nil, model.Changes{})
	time.Sleep(50 * time.Millisecond)
	if _, ok := getLease(t, client, "n1"); ok {
		t.Fatal("advertised before IPv6 synced")
	}
	first.afterSync(proxy.IPv6)(nil, model.Changes{})
	eventually(t, "the Lease written", func() bool { _, ok := getLease(t, client, "n1"); return ok })
	l, _ := getLease(t, client, "n1")
	if l.Spec.HolderIdentity == nil || *l.Spec.HolderIdentity != "n1" || l.Spec.AcquireTime == nil {
		t.Errorf("Lease spec %+v, want held by n1 with an acquire time", l.Spec)
	}
	if o := l.OwnerReferences; len(o) != 1 || o[0].Kind != "Node" || o[0].Name != "n1" || o[0].UID != "uid-n1" || o[0].APIVersion != "v1" {
		t.Errorf("owners %+v, want Node n1 uid-n1", o)
	}
	mu.Lock()
	defer mu.Unlock()
	if refusals != 0 {
		t.Errorf("%d refusals left: the advertisement did not go through the retries", refusals)
	}
}

// TestDSRAdvertisementOfEarlierNodeReplaced: a Lease left by an earlier
// Node of the name (another UID) is taken over; this Node's own, as a
// restart finds it, is renewed (renew time and duration written, acquire
// time kept).
func TestDSRAdvertisementOfEarlierNodeReplaced(t *testing.T) {
	client := fake.NewClientset(staleLease("n1", "earlier"))
	l := dsrDaemon(client, true).dsrLease()
	if err := l.put(context.Background()); err != nil {
		t.Fatal(err)
	}
	got, _ := getLease(t, client, "n1")
	if got.OwnerReferences[0].UID != "uid-n1" || got.Spec.AcquireTime == nil {
		t.Errorf("the earlier Node's Lease was not taken over: %+v", got)
	}
	acquired := got.Spec.AcquireTime.Time
	old := metav1.NewMicroTime(time.Unix(1700000000, 0))
	got.Spec.RenewTime = &old
	if _, err := client.CoordinationV1().Leases(testDSRNamespace).Update(context.Background(), got, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := l.put(context.Background()); err != nil {
		t.Fatal(err)
	}
	got, _ = getLease(t, client, "n1")
	if got.Spec.RenewTime == nil || !got.Spec.RenewTime.After(old.Time) || !got.Spec.AcquireTime.Time.Equal(acquired) {
		t.Errorf("the node's own Lease at a restart: %+v, want renewed, acquired at %v", got.Spec, acquired)
	}
	if d := got.Spec.LeaseDurationSeconds; d == nil || *d != int32(dsrLeaseDuration/time.Second) {
		t.Errorf("lease duration %v, want %v", d, dsrLeaseDuration)
	}
}

// TestDSRWithdrawnAtStartWithoutFlag: a start without --bpf-dsr deletes
// the Lease an earlier start left and waits for the peers to see it
// before going on; with none (or no namespace), or where the proxies may
// not look (no deploy/components/dsr), it goes on at once. Another node's
// Lease is left alone.
func TestDSRWithdrawnAtStartWithoutFlag(t *testing.T) {
	const withdrawWait = 300 * time.Millisecond
	shortDSRTimes(t, withdrawWait)
	client := fake.NewClientset(staleLease("n1", "n1"), staleLease("n2", "n2"))
	start := time.Now()
	dsrDaemon(client, false).withdrawDSR(context.Background())
	if _, ok := getLease(t, client, "n1"); ok {
		t.Error("the leftover Lease was not deleted")
	}
	if _, ok := getLease(t, client, "n2"); !ok {
		t.Error("another node's Lease was deleted")
	}
	if elapsed := time.Since(start); elapsed < withdrawWait {
		t.Errorf("went on after %v, before the withdrawal's wait of %v", elapsed, withdrawWait)
	}
	forbidden := fake.NewClientset()
	forbidden.PrependReactor("delete", "leases", func(clienttesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewForbidden(schema.GroupResource{Group: "coordination.k8s.io", Resource: "leases"}, "n1", errors.New("RBAC"))
	})
	for name, c := range map[string]*fake.Clientset{"none": client, "forbidden": forbidden} {
		start := time.Now()
		dsrDaemon(c, false).withdrawDSR(context.Background())
		if elapsed := time.Since(start); elapsed >= withdrawWait {
			t.Errorf("%s: waited %v with nothing withdrawn", name, elapsed)
		}
	}
	// With --bpf-dsr the start keeps it: its programs go on decapsulating.
	kept := fake.NewClientset(staleLease("n1", "n1"))
	dsrDaemon(kept, true).withdrawDSR(context.Background())
	if _, ok := getLease(t, kept, "n1"); !ok {
		t.Error("a start with --bpf-dsr withdrew its advertisement")
	}
}

// TestCleanupWithdrawsDSRBeforeDrain: --cleanup deletes this node's Lease
// and waits for the peers before any mode's leftovers stop taking
// connections (the tc programs' drain ends their decapsulation).
func TestCleanupWithdrawsDSRBeforeDrain(t *testing.T) {
	const withdrawWait = 200 * time.Millisecond
	shortDSRTimes(t, withdrawWait)
	client := fake.NewClientset(staleLease("n1", "n1"))
	var events []string
	var deletedAt time.Time
	client.PrependReactor("delete", "leases", func(clienttesting.Action) (bool, runtime.Object, error) {
		events, deletedAt = append(events, "withdraw"), time.Now()
		return false, nil, nil
	})
	drain := func(what string) func(context.Context, *config.Config) error {
		return func(context.Context, *config.Config) error {
			events = append(events, what)
			if what == "drain" && time.Since(deletedAt) < withdrawWait {
				t.Errorf("drained %v after the withdrawal, before its wait", time.Since(deletedAt))
			}
			return nil
		}
	}
	reg := backends.Registry{{Mode: proxy.ModeEBPF, StopNewConnections: drain("drain"), RemoveLeftovers: drain("remove")}}
	cfg := &config.Config{HostnameOverride: "n1", BPFDSRNamespace: testDSRNamespace}
	if err := cleanupWith(context.Background(), cfg, reg, client); err != nil {
		t.Fatal(err)
	}
	if got := events; len(got) != 3 || got[0] != "withdraw" || got[1] != "drain" {
		t.Errorf("order %v, want withdraw, drain, remove", got)
	}
	if _, ok := getLease(t, client, "n1"); ok {
		t.Error("the Lease is still there")
	}
	// Without an API client, the cleanup goes on.
	events = nil
	if err := cleanupWith(context.Background(), cfg, reg, nil); err != nil || len(events) != 2 {
		t.Errorf("without a client: err %v, events %v; want drain, remove", err, events)
	}
}

// TestDSRPeersReachNode: with --bpf-dsr the daemon watches every Node and
// the Leases, and the peers and the cluster's sources (every Node's
// addresses and pod CIDRs) reach the node Compute reads (the first sync
// waits for their initial lists); with --watch-node-addresses as well, the
// addresses come from the same Node informer. Without --bpf-dsr nothing
// is watched for peers or sources.
func TestDSRPeersReachNode(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	node := func(name, ip string) *v1.Node {
		return &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, UID: types.UID("uid-" + name)},
			Spec:   v1.NodeSpec{PodCIDRs: []string{"10.244." + ip[len(ip)-1:] + ".0/24"}},
			Status: v1.NodeStatus{Addresses: []v1.NodeAddress{{Type: v1.NodeInternalIP, Address: ip}}}}
	}
	for _, dsr := range []bool{true, false} {
		cfg := &config.Config{Mode: proxy.ModeEBPF, BPFDSR: dsr, BPFDSRNamespace: testDSRNamespace, WatchNodeAddresses: true}
		d := rowDaemon(t, cfg, backends.Table)
		client := d.client.(*fake.Clientset)
		for _, obj := range []runtime.Object{node("n1", "192.168.0.2"), node("n2", "192.168.0.3"), staleLease("n2", "n2"), staleLease("n1", "n1")} {
			if err := client.Tracker().Add(obj); err != nil {
				t.Fatal(err)
			}
		}
		lists, err := d.watchClusterLists(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		d.awaitInitialLists(ctx, lists)
		if _, ok := lists["DSR peers"]; ok != dsr {
			t.Errorf("--bpf-dsr=%t: watching DSR peers %t", dsr, ok)
		}
		n, _ := d.node.get()
		wantPeers, wantSources := "[]", "[]"
		if dsr {
			wantPeers = "[{n2 [192.168.0.3]}]"
			wantSources = "[10.244.2.0/24 10.244.3.0/24 192.168.0.2/32 192.168.0.3/32]"
		}
		if got := fmt.Sprint(n.Peers); got != wantPeers {
			t.Errorf("--bpf-dsr=%t: peers %s, want %s", dsr, got, wantPeers)
		}
		if got := fmt.Sprint(n.ClusterSources); got != wantSources {
			t.Errorf("--bpf-dsr=%t: cluster sources %s, want %s", dsr, got, wantSources)
		}
		if got := fmt.Sprint(n.ClusterNodeIPs); got != "[192.168.0.2 192.168.0.3]" {
			t.Errorf("--bpf-dsr=%t: cluster node IPs %s", dsr, got)
		}
	}
}

// TestDSRNotAdvertisedOffTCLinks: peers tunnel to the Node's status
// addresses and only the tc programs decapsulate, so a node whose
// addresses are not all on --bpf-tc-interfaces does not advertise, and
// withdraws what an earlier start advertised.
func TestDSRNotAdvertisedOffTCLinks(t *testing.T) {
	a := netip.MustParseAddr
	links := map[string][]netip.Addr{"eth0": {a("192.0.2.1"), a("2001:db8::1")}, "eth1": {a("198.51.100.1")}}
	addrsOf := func(link string) []netip.Addr { return links[link] }
	if got := addrsOffLinks([]netip.Addr{a("192.0.2.1"), a("2001:db8::1")}, []string{"eth0"}, addrsOf); len(got) != 0 {
		t.Errorf("both on eth0: missing %v", got)
	}
	if got := fmt.Sprint(addrsOffLinks([]netip.Addr{a("198.51.100.1"), a("2001:db8::1")}, []string{"eth1"}, addrsOf)); got != "[2001:db8::1]" {
		t.Errorf("IPv6 on eth0, tc on eth1: missing %s, want [2001:db8::1]", got)
	}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	shortDSRTimes(t, time.Millisecond)
	// An earlier start, whose tc interfaces held the address, advertised.
	client := fake.NewClientset(staleLease("n1", "n1"))
	d := dsrDaemon(client, true)
	d.cfg.BPFTCInterfaces = []string{"svcproxy-none0"}
	d.nodeInfo.IPs = []netip.Addr{a("192.0.2.1")}
	synced := make(chan struct{})
	close(synced)
	<-d.advertiseDSRAfter(ctx, synced)
	if _, ok := getLease(t, client, "n1"); ok {
		t.Error("advertised with the node's address on no tc interface, or kept an earlier start's advertisement")
	}
}
