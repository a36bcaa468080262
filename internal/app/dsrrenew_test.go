package app

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/fake"
	clienttesting "k8s.io/client-go/testing"
)

// advertising runs l.advertise in the background; the channel closes
// when it returns.
func advertising(ctx context.Context, l *dsrLease) <-chan struct{} {
	done := make(chan struct{})
	go func() {
		defer close(done)
		l.advertise(ctx)
	}()
	return done
}

func awaitReturn(t *testing.T, what string, done <-chan struct{}) {
	t.Helper()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatalf("still renewing after %s", what)
	}
}

func renewTimeOf(t *testing.T, client *fake.Clientset) time.Time {
	t.Helper()
	l, ok := getLease(t, client, "n1")
	if !ok || l.Spec.RenewTime == nil {
		return time.Time{}
	}
	return l.Spec.RenewTime.Time
}

// TestDSRLeaseRenewed: an advertising node renews its Lease every renew
// period (its renew time advances, its duration written); a renewal the
// API server refuses is retried. It stops renewing, and writes nothing
// back, once the Lease is withdrawn (--cleanup or a start without
// --bpf-dsr delete it) or taken over by a later Node of the name, and
// when ctx ends.
func TestDSRLeaseRenewed(t *testing.T) {
	shortDSRTimes(t, time.Millisecond)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	client := fake.NewClientset()
	var mu sync.Mutex
	refusals := 0
	client.PrependReactor("update", "leases", func(clienttesting.Action) (bool, runtime.Object, error) {
		mu.Lock()
		defer mu.Unlock()
		if refusals > 0 {
			refusals--
			return true, nil, errors.New("the API server is away")
		}
		return false, nil, nil
	})
	l := dsrDaemon(client, true).dsrLease()
	done := advertising(ctx, l)
	eventually(t, "the Lease written", func() bool { return !renewTimeOf(t, client).IsZero() })
	first := renewTimeOf(t, client)
	eventually(t, "a renewal", func() bool { return renewTimeOf(t, client).After(first) })
	if got, _ := getLease(t, client, "n1"); *got.Spec.LeaseDurationSeconds != int32(dsrLeaseDuration/time.Second) {
		t.Errorf("lease duration %d, want %v", *got.Spec.LeaseDurationSeconds, dsrLeaseDuration)
	}

	mu.Lock()
	refusals = 3
	mu.Unlock()
	refused := renewTimeOf(t, client)
	eventually(t, "a renewal after refusals", func() bool {
		// Not holding mu while reading the Lease: the fake client runs
		// the reactor, which takes mu, under its own lock.
		mu.Lock()
		left := refusals
		mu.Unlock()
		return left == 0 && renewTimeOf(t, client).After(refused)
	})

	if err := client.CoordinationV1().Leases(testDSRNamespace).Delete(ctx, "n1", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	awaitReturn(t, "the withdrawal", done)
	if _, ok := getLease(t, client, "n1"); ok {
		t.Error("a withdrawn Lease was written back")
	}

	// A later Node of the name took the Lease: it is left to it.
	if err := client.Tracker().Add(staleLease("n1", "later")); err != nil {
		t.Fatal(err)
	}
	if err := l.renew(ctx); !errors.Is(err, errNotAdvertised) {
		t.Errorf("renewing another Node's Lease: %v, want errNotAdvertised", err)
	}
	if got, _ := getLease(t, client, "n1"); got.OwnerReferences[0].UID != "uid-later" || got.Spec.RenewTime != nil {
		t.Errorf("another Node's Lease was written: %+v", got)
	}

	ctx2, cancel2 := context.WithCancel(context.Background())
	renewing := advertising(ctx2, dsrDaemon(fake.NewClientset(), true).dsrLease())
	cancel2()
	awaitReturn(t, "ctx ended", renewing)
}

// TestDSRRenewRereadsOnConflict: a renewal writes with the
// resourceVersion it read; on a conflict (another writer in between) it
// reads the Lease again and renews that.
func TestDSRRenewRereadsOnConflict(t *testing.T) {
	client := fake.NewClientset()
	l := dsrDaemon(client, true).dsrLease()
	lease := l.want()
	lease.ResourceVersion = "7"
	if err := client.Tracker().Add(lease); err != nil {
		t.Fatal(err)
	}
	conflicts := 1
	client.PrependReactor("update", "leases", func(a clienttesting.Action) (bool, runtime.Object, error) {
		if rv := a.(clienttesting.UpdateAction).GetObject().(*coordinationv1.Lease).ResourceVersion; rv != "7" {
			t.Errorf("an update with resourceVersion %q, want the one read", rv)
		}
		if conflicts > 0 {
			conflicts--
			return true, nil, apierrors.NewConflict(schema.GroupResource{Group: "coordination.k8s.io", Resource: "leases"}, "n1", errors.New("modified"))
		}
		return false, nil, nil
	})
	client.ClearActions()
	if err := l.renew(context.Background()); err != nil {
		t.Fatalf("renew after a conflict: %v", err)
	}
	gets := 0
	for _, a := range client.Actions() {
		if a.GetVerb() == "get" {
			gets++
		}
	}
	if gets != 2 || conflicts != 0 {
		t.Errorf("%d reads, %d conflicts left; want the Lease read again after the conflict", gets, conflicts)
	}
}

// TestRenewDelaySpreadsRenewals: renewals come within a tenth of the
// period either way, so nodes in step drift apart, and two late ones still
// fit in the Lease's duration.
func TestRenewDelaySpreadsRenewals(t *testing.T) {
	p := 5 * time.Minute
	for _, c := range []struct {
		u    float64
		want time.Duration
	}{{0, 270 * time.Second}, {0.5, p}, {0.999999, 330 * time.Second}} {
		if got := renewDelay(p, c.u); got.Round(time.Second) != c.want {
			t.Errorf("renewDelay(%v, %v) = %v, want %v", p, c.u, got, c.want)
		}
	}
	if d := renewDelay(dsrRenewPeriod, 0.999999); 2*d >= dsrLeaseDuration {
		t.Errorf("two late renewals (%v each) outlast the Lease's %v", d, dsrLeaseDuration)
	}
}
