package watch

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"sync"
	"testing"
	"time"

	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/fake"
	clienttesting "k8s.io/client-go/testing"
)

func serviceCIDR(name string, cidrs ...string) *networkingv1.ServiceCIDR {
	return &networkingv1.ServiceCIDR{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: networkingv1.ServiceCIDRSpec{CIDRs: cidrs}}
}

// The watcher reports the union of every object's ranges as objects come
// and go; a range two objects name survives the deletion of one of them
// (upstream's handler deletes it from its shared set).
func TestServiceCIDRsFollowObjects(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	client := fake.NewClientset(serviceCIDR("kubernetes", "10.96.0.0/16", "fd00:10:96::/112"))
	got := make(chan []netip.Prefix, 16)
	if err := NewServiceCIDRs(client, 0, func(c []netip.Prefix) { got <- c }).Start(ctx); err != nil {
		t.Fatal(err)
	}
	expect := func(want ...string) {
		t.Helper()
		select {
		case c := <-got:
			if s := fmt.Sprint(c); s != fmt.Sprint(prefixes(want...)) {
				t.Fatalf("service CIDRs %s, want %v", s, want)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("no update, want %v", want)
		}
	}
	expect("10.96.0.0/16", "fd00:10:96::/112")
	api := client.NetworkingV1().ServiceCIDRs()
	if _, err := api.Create(ctx, serviceCIDR("extra", "10.96.0.0/16", "10.100.0.0/24"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	expect("10.96.0.0/16", "10.100.0.0/24", "fd00:10:96::/112")
	if err := api.Delete(ctx, "extra", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	expect("10.96.0.0/16", "fd00:10:96::/112")
	if err := api.Delete(ctx, "kubernetes", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	expect()
}

func TestServiceCIDRsOfSkipsInvalid(t *testing.T) {
	objs := []any{
		serviceCIDR("a", "10.96.0.0/16", "garbage", "fe80::/64%eth0", "::ffff:10.0.0.0/104"),
		serviceCIDR("b", "10.96.0.0/16", "10.0.0.1/8"),
		"not a ServiceCIDR",
	}
	if got, want := ServiceCIDRsOf(objs), prefixes("10.0.0.0/8", "10.96.0.0/16"); !slices.Equal(got, want) {
		t.Errorf("ServiceCIDRsOf = %v, want %v", got, want)
	}
}

func prefixes(ss ...string) []netip.Prefix {
	out := []netip.Prefix{}
	for _, s := range ss {
		out = append(out, netip.MustParsePrefix(s))
	}
	return out
}

// After an API server outage the watch is open again within 1 s and
// delivers (through reconnecting; client-go's own backoff applied a new
// ServiceCIDR 25–60 s late after the e2e suite's outage).
func TestServiceCIDRsReconnectAfterOutage(t *testing.T) {
	t.Parallel()
	client := fake.NewClientset()
	o := newOutage(client, "servicecidrs")
	var mu sync.Mutex
	var last []netip.Prefix
	w := NewServiceCIDRs(client, 0, func(c []netip.Prefix) { mu.Lock(); last = c; mu.Unlock() })
	w.reconnect = fastReconnect
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := w.Start(ctx); err != nil {
		t.Fatal(err)
	}
	cidr := map[string]string{"before": "10.96.0.0/16", "after": "10.100.0.0/24"}
	o.run(t, func(fw *watch.FakeWatcher, name string) { fw.Add(serviceCIDR(name, cidr[name])) }, func(name string) bool {
		mu.Lock()
		defer mu.Unlock()
		return slices.Contains(last, netip.MustParsePrefix(cidr[name]))
	})
}

// WaitForInitialList returns once the handler has reported the listed
// ranges, so that a first sync after it has them (a restart whose first
// sync came before them dropped the ranges' rules and wrote them back);
// an empty list counts as listed.
func TestServiceCIDRsWaitForInitialList(t *testing.T) {
	for name, objs := range map[string][]runtime.Object{
		"one object": {serviceCIDR("kubernetes", "10.96.0.0/16")},
		"none":       nil,
	} {
		t.Run(name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			var mu sync.Mutex
			var got []netip.Prefix
			w := NewServiceCIDRs(fake.NewClientset(objs...), 0, func(c []netip.Prefix) { mu.Lock(); got = c; mu.Unlock() })
			if w.WaitForInitialList(ctx, time.Millisecond) {
				t.Fatal("WaitForInitialList reported a list before Start")
			}
			if err := w.Start(ctx); err != nil {
				t.Fatal(err)
			}
			if !w.WaitForInitialList(ctx, 10*time.Second) {
				t.Fatal("the initial list was not handled within 10 s")
			}
			mu.Lock()
			defer mu.Unlock()
			if len(objs) > 0 && fmt.Sprint(got) != "[10.96.0.0/16]" {
				t.Errorf("after WaitForInitialList the handler had reported %v, want [10.96.0.0/16]", got)
			}
		})
	}
}

// An API server that does not serve ServiceCIDRs (the API disabled, or
// RBAC without them) never lists them: WaitForInitialList gives up after
// its timeout rather than holding the first sync for ever.
func TestServiceCIDRsWaitGivesUp(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	client := fake.NewClientset()
	client.PrependReactor("list", "servicecidrs", func(clienttesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewNotFound(networkingv1.Resource("servicecidrs"), "")
	})
	w := NewServiceCIDRs(client, 0, func([]netip.Prefix) {})
	w.reconnect = fastReconnect
	if err := w.Start(ctx); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if w.WaitForInitialList(ctx, 300*time.Millisecond) {
		t.Fatal("WaitForInitialList reported a list the API server refused")
	}
	if waited := time.Since(start); waited < 300*time.Millisecond {
		t.Errorf("gave up after %v, before its timeout", waited)
	}
}
