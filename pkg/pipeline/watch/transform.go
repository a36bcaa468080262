package watch

// Parsing as the list arrives.
//
// The reflector's transform (cache.TransformFunc) has each target's tracker
// parse an object as soon as it is decoded: the initial list page by page
// (pagedlist.go: a page's objects are parsed before the next page is
// asked for, so the reflector only ever holds parses), and each watch event
// in the directStore (direct.go). The decoded object is garbage at once; at
// the end of the list the trackers only take what is parsed.
//
// The tests (transform_test.go) fill every field at random and check that
// the model is the same through this path as when the tracker is handed
// the object itself.

import (
	v1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/svcproxy/svcproxy/pkg/pipeline/model"
)

// parsed is what the reflector's stores hold of a Service or EndpointSlice
// (P is *model.ParsedService or *model.ParsedEndpointSlice): the identity
// that the reflector and the directStore need (namespace and name for the
// key, resourceVersion, and uid for client-go's optional consistency
// check of a streamed list), and each target's parse, in target order.
type parsed[P any] struct {
	metav1.TypeMeta
	metav1.ObjectMeta
	byTarget []P
}

// DeepCopyObject makes parsed a runtime.Object, which client-go's
// consistency check (KUBE_WATCHLIST_INCONSISTENCY_DETECTOR) asks of what
// the transform returns. The parses are shared: they are the trackers' to
// take, not to copy.
func (p *parsed[P]) DeepCopyObject() runtime.Object {
	out := *p
	p.ObjectMeta.DeepCopyInto(&out.ObjectMeta)
	return &out
}

// target returns target i's parse, nil for a nil p (no object).
func (p *parsed[P]) target(i int) P {
	var none P
	if p == nil {
		return none
	}
	return p.byTarget[i]
}

// identity keeps of m what the stores need.
func identity(m *metav1.ObjectMeta) metav1.ObjectMeta {
	return metav1.ObjectMeta{Name: m.Name, Namespace: m.Namespace, UID: m.UID, ResourceVersion: m.ResourceVersion}
}

// parseFor has each target parse one object.
func parseFor[P any](targets []Target, m *metav1.ObjectMeta, parse func(Tracker) P) *parsed[P] {
	out := &parsed[P]{ObjectMeta: identity(m), byTarget: make([]P, len(targets))}
	for i, t := range targets {
		out.byTarget[i] = parse(t.Tracker)
	}
	return out
}

// parseService is the Services' transform: a *v1.Service becomes its
// parses; anything else (already parsed, unexpected) passes unchanged.
func (w *Informers) parseService(obj any) (any, error) {
	svc, ok := obj.(*v1.Service)
	if !ok {
		return obj, nil
	}
	return parseFor(w.targets, &svc.ObjectMeta, func(t Tracker) *model.ParsedService { return t.ParseService(svc) }), nil
}

// parseSlice is the EndpointSlices' transform, as parseService.
func (w *Informers) parseSlice(obj any) (any, error) {
	s, ok := obj.(*discoveryv1.EndpointSlice)
	if !ok {
		return obj, nil
	}
	return parseFor(w.targets, &s.ObjectMeta, func(t Tracker) *model.ParsedEndpointSlice { return t.ParseEndpointSlice(s) }), nil
}

// serviceStub and sliceStub are the old side of an update and the deletion
// a relist finds: only the name.
func (w *Informers) serviceStub(namespace, name string) any {
	return stubFor(w.targets, namespace, name, model.ServiceStub)
}

func (w *Informers) sliceStub(namespace, name string) any {
	return stubFor(w.targets, namespace, name, model.EndpointSliceStub)
}

func stubFor[P any](targets []Target, namespace, name string, stub func(namespace, name string) P) *parsed[P] {
	one := stub(namespace, name)
	out := &parsed[P]{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name}, byTarget: make([]P, len(targets))}
	for i := range out.byTarget {
		out.byTarget[i] = one
	}
	return out
}
