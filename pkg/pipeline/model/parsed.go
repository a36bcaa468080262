package model

// Parsing ahead of the tracker.
//
// A Tracker parses each object it is given. The watcher can have that done
// earlier, as each object of the initial streaming list is decoded, instead
// of after the whole list arrived: it asks the tracker for the parsed form
// (ParseService, ParseEndpointSlice), keeps only that until the list is
// complete, and hands it back to the same tracker (OnParsedServiceUpdate,
// OnParsedEndpointSliceUpdate). A parse is a tracker's own: it is for the
// tracker's IP family and shares strings through the tracker's interner.
// Parsing changes nothing in the tracker; taking the parse does, and that
// is when problems are reported and the event is counted.

import (
	v1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"

	"github.com/svcproxy/svcproxy/pkg/proxy"
)

// ParsedService is what a Tracker made of a Service (Tracker.ParseService),
// for that tracker to take, once. A stub (ServiceStub) holds only the name:
// the old side of an update or a delete, of which nothing else is read.
type ParsedService struct {
	name     proxy.ServiceName
	ports    []*ServicePort
	problems []error
}

// ServiceStub returns the old side of an update or delete of the Service
// namespace/name.
func ServiceStub(namespace, name string) *ParsedService {
	return &ParsedService{name: proxy.ServiceName{Namespace: namespace, Name: name}}
}

// Namespace and Name identify the Service.
func (s *ParsedService) Namespace() string { return s.name.Namespace }
func (s *ParsedService) Name() string      { return s.name.Name }

// ParseService parses svc for this tracker.
func (t *Tracker) ParseService(svc *v1.Service) *ParsedService {
	ports, problems := ParseService(svc, t.family)
	return &ParsedService{name: proxy.ServiceName{Namespace: svc.Namespace, Name: svc.Name}, ports: ports, problems: problems}
}

// ParsedEndpointSlice is what a Tracker made of an EndpointSlice
// (Tracker.ParseEndpointSlice), for that tracker to take, once. A slice of
// another family (or FQDN) keeps only what the tracker needs to drop it; a
// stub (EndpointSliceStub) holds only the name.
type ParsedEndpointSlice struct {
	key    sliceKey
	family proxy.IPFamily
	// named: the slice has a service-name label (what the event counter
	// needs of a deleted slice).
	named bool
	// endpoints is nil for another family, a stub or an invalid slice (err).
	endpoints *sliceEndpoints
	problems  []error
	err       error
}

// EndpointSliceStub returns the old side of an update or delete of the
// EndpointSlice namespace/name.
func EndpointSliceStub(namespace, name string) *ParsedEndpointSlice {
	return &ParsedEndpointSlice{key: sliceKey{namespace: namespace, name: name}}
}

// Namespace and Name identify the EndpointSlice.
func (s *ParsedEndpointSlice) Namespace() string { return s.key.namespace }
func (s *ParsedEndpointSlice) Name() string      { return s.key.name }

// ParseEndpointSlice parses slice for this tracker; a slice of another
// family is only identified.
func (t *Tracker) ParseEndpointSlice(slice *discoveryv1.EndpointSlice) *ParsedEndpointSlice {
	p := identifySlice(slice)
	if p.family == t.family {
		p.key.namespace = t.names.str(p.key.namespace)
		p.endpoints, p.problems, p.err = parseEndpointSlice(slice, t.family, t.names)
	}
	return p
}

// identifySlice returns what the tracker reads of the old side of a slice
// event: its key, family and whether it names its Service.
func identifySlice(slice *discoveryv1.EndpointSlice) *ParsedEndpointSlice {
	return &ParsedEndpointSlice{
		key:    sliceKey{namespace: slice.Namespace, name: slice.Name},
		family: sliceFamily(slice),
		named:  slice.Labels[discoveryv1.LabelServiceName] != "",
	}
}

// OnServiceUpdate records an add (old nil), update, or delete (new nil) of
// a Service object: OnParsedServiceUpdate of its parse.
func (t *Tracker) OnServiceUpdate(old, new *v1.Service) bool {
	var o, n *ParsedService
	if old != nil {
		o = ServiceStub(old.Namespace, old.Name)
	}
	if new != nil {
		n = t.ParseService(new)
	}
	return t.OnParsedServiceUpdate(o, n)
}

// OnEndpointSliceUpdate records an add (old nil), update, or delete (new
// nil) of an EndpointSlice object: OnParsedEndpointSliceUpdate of its parse.
func (t *Tracker) OnEndpointSliceUpdate(old, new *discoveryv1.EndpointSlice) bool {
	var o, n *ParsedEndpointSlice
	if old != nil {
		o = identifySlice(old)
	}
	if new != nil {
		n = t.ParseEndpointSlice(new)
	}
	return t.OnParsedEndpointSliceUpdate(o, n)
}
