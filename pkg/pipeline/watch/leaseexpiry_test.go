package watch

import (
	"context"
	"fmt"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	clocktesting "k8s.io/utils/clock/testing"
)

// renewedLease is node's advertisement as a renewing node writes it:
// renewed at renew (by the node's clock), for duration seconds.
func renewedLease(node string, renew time.Time, duration int32) *coordinationv1.Lease {
	l := dsrLease(node, node, types.UID("uid-"+node))
	t := metav1.NewMicroTime(renew)
	l.Spec.RenewTime, l.Spec.LeaseDurationSeconds = &t, &duration
	return l
}

func leaseNames(objs []any) string {
	var names []string
	for _, obj := range objs {
		names = append(names, obj.(*coordinationv1.Lease).Name)
	}
	return fmt.Sprint(names)
}

// TestLeaseObservationsExpireByObserverClock: a Lease counts until its
// duration (and the grace) has passed since this process last saw its
// renewal change, whatever time the renewal itself names (the nodes'
// clocks may be skewed either way); a renewed one stays; one without a
// duration (an older svcproxy's, never renewed) never expires; a Lease
// gone and back counts as new.
func TestLeaseObservationsExpireByObserverClock(t *testing.T) {
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	const duration = 90
	full := duration*time.Second + leaseExpiryGrace
	past, future := start.Add(-24*time.Hour), start.Add(24*time.Hour)
	stale := renewedLease("stale", past, duration)
	renewed := renewedLease("renewed", future, duration)
	old := dsrLease("old", "old", "uid-old")
	var o leaseObservations

	live, next := o.live([]any{stale, renewed, old}, start)
	if got := leaseNames(live); got != "[stale renewed old]" {
		t.Errorf("first seen: %s, want all: a Lease first seen counts as just renewed", got)
	}
	if !next.Equal(start.Add(full)) {
		t.Errorf("next expiry %v, want %v", next, start.Add(full))
	}
	// Half way, "renewed" is renewed (to a time its node's clock names,
	// earlier than the last one); "stale" is not.
	half := start.Add(full / 2)
	renewed = renewedLease("renewed", future.Add(-time.Hour), duration)
	if live, _ := o.live([]any{stale, renewed, old}, half); leaseNames(live) != "[stale renewed old]" {
		t.Errorf("half way: %s, want all", leaseNames(live))
	}
	live, next = o.live([]any{stale, renewed, old}, start.Add(full))
	if got := leaseNames(live); got != "[renewed old]" {
		t.Errorf("after the duration: %s, want [renewed old]", got)
	}
	if !next.Equal(half.Add(full)) {
		t.Errorf("next expiry %v, want the renewed one's %v", next, half.Add(full))
	}
	live, next = o.live([]any{stale, renewed, old}, start.Add(1000*time.Hour))
	if got := leaseNames(live); got != "[old]" || !next.IsZero() {
		t.Errorf("much later: %s, next %v; want [old] and no expiry", got, next)
	}
	// Deleted and written again with the same renew time, it is new.
	later := start.Add(1001 * time.Hour)
	o.live([]any{old}, later)
	if live, _ := o.live([]any{stale, old}, later); leaseNames(live) != "[stale old]" {
		t.Errorf("written again: %s, want [stale old]", leaseNames(live))
	}
}

// TestPeersExpireWithoutEvents: a peer whose Lease is not renewed drops
// out once its duration has passed on this process's clock, with no API
// event (a timer re-checks), and is back once it is renewed; an older
// svcproxy's Lease without a duration stays.
func TestPeersExpireWithoutEvents(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	clk := clocktesting.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	// Renewed by a clock a day ahead of this one's: it does not matter.
	skewed := clk.Now().Add(24 * time.Hour)
	client := fake.NewClientset(peerNode("self", "192.0.2.9"), peerNode("a", "192.0.2.1"), peerNode("old", "192.0.2.2"),
		renewedLease("a", skewed, 90), dsrLease("old", "old", "uid-old"))
	nodes, err := NewClusterNodes(client, 0)
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan []Peer, 16)
	w := NewPeers(client, 0, dsrNamespace, "self", func(p []Peer) { got <- p })
	w.clock = clk
	if err := w.StartOn(ctx, nodes); err != nil {
		t.Fatal(err)
	}
	nodes.Start(ctx)
	expect := func(want string) {
		t.Helper()
		expectNext(t, got, "peers", want)
	}
	expect("[{a [192.0.2.1]} {old [192.0.2.2]}]")
	clk.Step(90*time.Second + leaseExpiryGrace - time.Millisecond)
	clk.Step(time.Millisecond)
	expect("[{old [192.0.2.2]}]")
	if _, err := client.CoordinationV1().Leases(dsrNamespace).Update(ctx, renewedLease("a", skewed.Add(30*time.Second), 90), metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	expect("[{a [192.0.2.1]} {old [192.0.2.2]}]")
}
