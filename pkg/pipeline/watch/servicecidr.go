package watch

import (
	"context"
	"net/netip"
	"slices"
	"time"

	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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
type ServiceCIDRs struct{ union[netip.Prefix] }

// NewServiceCIDRs returns a watcher that calls changed (from the informer's
// goroutine) with the union after every change of it.
func NewServiceCIDRs(client kubernetes.Interface, resync time.Duration, changed func([]netip.Prefix)) *ServiceCIDRs {
	return &ServiceCIDRs{newUnion(client, resync, "Service CIDRs", ServiceCIDRsOf, changed)}
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
	if err := w.start(ctx, informer, nil); err != nil {
		return err
	}
	factory.Start(ctx.Done())
	return nil
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
