package watch

import (
	"context"
	"net/netip"
	"slices"
	"sync"
	"time"

	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
)

// ServiceCIDRs watches the cluster's networking.k8s.io/v1 ServiceCIDR
// objects and reports the union of their spec.cidrs (both families, sorted,
// unique) whenever it changes. Upstream's nftables mode drops traffic to
// addresses of these ranges that no Service holds. The daemon holds its
// first sync until their initial list was handled (WaitForInitialList):
// upstream does not, and a restart whose lists came faster than the
// ServiceCIDRs' then dropped the range's rules and wrote them back a few
// milliseconds later (bench-e2e at 1k Services: 8–16 kernel changes at
// every unchanged restart). Unlike upstream's handler, which
// deletes an old object's CIDRs from a shared set (so that two objects
// naming one CIDR lose it when either goes), the union is recomputed from
// every object held.
type ServiceCIDRs struct {
	client  kubernetes.Interface
	resync  time.Duration
	changed func([]netip.Prefix)
	// reconnect is how the watch retries an unreachable API server.
	reconnect wait.Backoff

	mu   sync.Mutex
	last []netip.Prefix
	// handled reports whether the handler has seen the initial list; nil
	// before Start.
	handled func() bool
}

// NewServiceCIDRs returns a watcher that calls changed (from the informer's
// goroutine) with the union after every change of it.
func NewServiceCIDRs(client kubernetes.Interface, resync time.Duration, changed func([]netip.Prefix)) *ServiceCIDRs {
	return &ServiceCIDRs{client: client, resync: resync, changed: changed, reconnect: ReconnectBackoff}
}

// Start runs the informer until ctx ends.
func (w *ServiceCIDRs) Start(ctx context.Context) error {
	// Through reconnecting, as every informer here: after an API server
	// outage client-go's own backoff applied the ranges 25–60 s late
	// (reconnect.go); the e2e outage scenario caught it.
	factory := informers.NewSharedInformerFactory(w.client, w.resync)
	informer := factory.InformerFor(&networkingv1.ServiceCIDR{}, func(c kubernetes.Interface, resync time.Duration) cache.SharedIndexInformer {
		noTweak := func(*metav1.ListOptions) {}
		return newInformer(listWatch[*networkingv1.ServiceCIDRList](c.NetworkingV1().ServiceCIDRs(), noTweak),
			c, &networkingv1.ServiceCIDR{}, "servicecidrs", resync, w.reconnect)
	})
	store := informer.GetStore()
	update := func(any) { w.update(store.List()) }
	reg, err := informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    update,
		UpdateFunc: func(_, obj any) { update(obj) },
		DeleteFunc: update,
	})
	if err != nil {
		return err
	}
	w.handled = reg.HasSynced
	factory.Start(ctx.Done())
	return nil
}

// initialListPoll is how often WaitForInitialList looks: client-go's
// WaitForCacheSync polls every 100 ms, a tenth of a 10k start.
const initialListPoll = 5 * time.Millisecond

// WaitForInitialList blocks until the handler has seen the initial list
// (an empty one too), for at most timeout, and reports whether it has. An
// API server that does not serve ServiceCIDRs (disabled, or not allowed to
// this client) never lists them: the caller goes on without.
func (w *ServiceCIDRs) WaitForInitialList(ctx context.Context, timeout time.Duration) bool {
	if w.handled == nil {
		return false
	}
	err := wait.PollUntilContextTimeout(ctx, initialListPoll, timeout, true, func(context.Context) (bool, error) {
		return w.handled(), nil
	})
	return err == nil
}

func (w *ServiceCIDRs) update(objs []any) {
	cidrs := ServiceCIDRsOf(objs)
	w.mu.Lock()
	same := slices.Equal(cidrs, w.last) && w.last != nil
	w.last = cidrs
	w.mu.Unlock()
	if !same {
		klog.V(2).InfoS("Service CIDRs changed", "cidrs", cidrs)
		w.changed(cidrs)
	}
}

// ServiceCIDRsOf is the sorted, unique union of the spec.cidrs of the
// ServiceCIDR objects in objs (never nil). The API server validates them
// as canonical CIDRs; anything else is skipped.
func ServiceCIDRsOf(objs []any) []netip.Prefix {
	out := []netip.Prefix{}
	for _, obj := range objs {
		sc, ok := obj.(*networkingv1.ServiceCIDR)
		if !ok {
			continue
		}
		for _, s := range sc.Spec.CIDRs {
			p, err := netip.ParsePrefix(s)
			if err != nil || p.Addr().Zone() != "" || p.Addr().Is4In6() {
				klog.V(2).InfoS("Ignoring an invalid ServiceCIDR range", "serviceCIDR", sc.Name, "cidr", s)
				continue
			}
			out = append(out, p.Masked())
		}
	}
	slices.SortFunc(out, func(a, b netip.Prefix) int {
		if c := a.Addr().Compare(b.Addr()); c != 0 {
			return c
		}
		return a.Bits() - b.Bits()
	})
	return slices.Compact(out)
}
