package watch

// How large an initial list is, told by its first page.
//
// A backend that creates something sized from the State (ebpf mode's
// maps) can create it at its final size while the rest of the lists
// arrive, if it knows that size before the lists end. The first page of a
// Service or EndpointSlice list is a sample of it: how many service ports
// or endpoints its objects hold, per IP family. Scaled to the whole list's
// length, that is an estimate of what the first State holds.
//
// The length comes from the page itself when it is the whole list, else
// from its metadata.remainingItemCount. The API server leaves that out of
// a list with a label selector (it would count the objects the selector
// drops), and the lists here always have one; then a second list of one
// object without the selector, asked beside the rest of the pages, gives
// the count of every object of the kind, the unselected ones included (a
// headless Service's slices, another proxy's Services): an estimate on the
// high side, which costs a backend only room it does not fill. An API
// server that gives no count either leaves the size unknown.

import (
	"context"
	"net/netip"
	"time"

	v1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/svcproxy/svcproxy/pkg/proxy"
)

// countTimeout bounds the count of a list's objects.
const countTimeout = 10 * time.Second

// ListSize is what the first page of an initial list told of the whole
// list.
type ListSize struct {
	// Kind is "Service" or "EndpointSlice".
	Kind string
	// Known is false when neither the page nor a count told how many
	// objects the list has; the other fields are then zero.
	Known bool
	// Objects is how many objects the list has (an estimate when it
	// came from a count without the label selector).
	Objects int
	// Sampled is how many objects the first page had, and Units what
	// they held per family: service ports with a cluster IP of the
	// family, or endpoint and port pairs of the family's slices.
	Sampled int
	Units   map[proxy.IPFamily]int
}

// Estimate is the family's units in the whole list: the page's, scaled to
// the list's length.
func (s ListSize) Estimate(family proxy.IPFamily) int {
	if !s.Known || s.Sampled == 0 {
		return 0
	}
	return int(int64(s.Units[family]) * int64(s.Objects) / int64(s.Sampled))
}

// listSampler measures the objects of a list's first page and reports the
// list's size once, to sized.
type listSampler struct {
	kind    string
	measure func(runtime.Object, map[proxy.IPFamily]int)
	// count asks for the number of objects of the kind, without the
	// label selector; ok is false when the API server does not say.
	count func(context.Context) (n int, ok bool)
	sized func(ListSize)
	// sampling is the size being measured, during a first page.
	sampling *ListSize
	done     bool
}

// begin starts measuring a first page, unless the size was reported.
func (s *listSampler) begin() {
	if s == nil || s.done {
		return
	}
	s.sampling = &ListSize{Kind: s.kind, Units: map[proxy.IPFamily]int{}}
}

// add measures one object of the page.
func (s *listSampler) add(obj runtime.Object) {
	if s == nil || s.sampling == nil {
		return
	}
	s.sampling.Sampled++
	s.measure(obj, s.sampling.Units)
}

// end reports the size from the page's metadata, or from a count asked on
// a goroutine of its own when the metadata does not say: the rest of the
// list does not wait for it.
func (s *listSampler) end(ctx context.Context, lm metav1.ListMeta) {
	if s == nil || s.sampling == nil {
		return
	}
	size := *s.sampling
	s.sampling, s.done = nil, true
	switch {
	case lm.Continue == "":
		size.Known, size.Objects = true, size.Sampled
	case lm.RemainingItemCount != nil && *lm.RemainingItemCount >= 0:
		size.Known, size.Objects = true, size.Sampled+int(*lm.RemainingItemCount)
	default:
		go func() {
			// The list may end first, and its context with it.
			ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), countTimeout)
			defer cancel()
			n, ok := s.count(ctx)
			if ok {
				size.Known, size.Objects = true, max(n, size.Sampled)
			}
			s.report(size)
		}()
		return
	}
	s.report(size)
}

func (s *listSampler) report(size ListSize) {
	if !size.Known {
		size = ListSize{Kind: size.Kind}
	}
	s.sized(size)
}

// countObjects returns the count of api's objects: a list of one object
// without a label selector, whose remainingItemCount the API server sets.
func countObjects[L runtime.Object](api listWatchAPI[L]) func(context.Context) (int, bool) {
	return func(ctx context.Context) (int, bool) {
		page, err := api.List(ctx, metav1.ListOptions{Limit: 1})
		if err != nil {
			return 0, false
		}
		lm, err := meta.ListAccessor(page)
		if err != nil {
			return 0, false
		}
		n := meta.LenList(page)
		switch rest := lm.GetRemainingItemCount(); {
		case lm.GetContinue() == "":
			return n, true
		case rest != nil && *rest >= 0:
			return n + int(*rest), true
		}
		return 0, false
	}
}

// servicePorts counts a Service's ports per family of its cluster IPs.
func servicePorts(obj runtime.Object, units map[proxy.IPFamily]int) {
	svc, ok := obj.(*v1.Service)
	if !ok {
		return
	}
	ips := svc.Spec.ClusterIPs
	if len(ips) == 0 && svc.Spec.ClusterIP != "" {
		ips = []string{svc.Spec.ClusterIP}
	}
	for _, s := range ips {
		ip, err := netip.ParseAddr(s)
		if err != nil {
			continue // "None" (headless) or not an address
		}
		units[familyOf(ip)] += len(svc.Spec.Ports)
	}
}

// endpointPorts counts a slice's endpoint and port pairs for its family.
func endpointPorts(obj runtime.Object, units map[proxy.IPFamily]int) {
	slice, ok := obj.(*discoveryv1.EndpointSlice)
	if !ok {
		return
	}
	var family proxy.IPFamily
	switch slice.AddressType {
	case discoveryv1.AddressTypeIPv4:
		family = proxy.IPv4
	case discoveryv1.AddressTypeIPv6:
		family = proxy.IPv6
	default:
		return
	}
	units[family] += len(slice.Endpoints) * max(1, len(slice.Ports))
}

func familyOf(ip netip.Addr) proxy.IPFamily {
	if ip.Unmap().Is4() {
		return proxy.IPv4
	}
	return proxy.IPv6
}
