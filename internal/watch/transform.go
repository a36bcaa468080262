package watch

// Keeping only what the model reads.
//
// The informers cache every Service and EndpointSlice, and the model's
// trackers parse each one again into their own form; the cached object is
// only handed back as the "old" side of the next event, of which the
// trackers read the namespace and name. Each object is stripped as it is
// decoded (cache.TransformFunc, applied by the reflector before anything
// holds it, the initial streaming list included) down to the fields that
// model.ParseService and the EndpointSlice parser read, plus what the
// informer itself needs (name, namespace, resourceVersion, uid). A Service
// or slice written by the API server carries managedFields, labels copied
// from the Service, a targetRef per endpoint and the kubectl
// last-applied-configuration annotation; none of them changes a rule.
//
// The tests (transform_test.go) fill every field at random and check that
// the parsed model is the same with and without the transform, so a field
// the parser starts to read but this file drops fails them.

import (
	v1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/svcproxy/svcproxy/pkg/proxy/model"
)

// keptAnnotations are the annotations some part of svcproxy reads.
var keptAnnotations = []string{
	model.SchedulerAnnotation,
	v1.AnnotationTopologyMode,
	v1.DeprecatedAnnotationTopologyAwareHints,
	v1.EndpointsLastChangeTriggerTime,
}

// keptLabels are the labels svcproxy reads or selects by.
var keptLabels = []string{
	discoveryv1.LabelServiceName,
	LabelServiceProxyName,
	LabelHeadless,
}

// leanObject is the cache.TransformFunc of both informers: Services and
// EndpointSlices are replaced by their lean form, anything else (a delete
// tombstone, an unexpected type) passes unchanged.
func leanObject(obj any) (any, error) {
	switch o := obj.(type) {
	case *v1.Service:
		return leanService(o), nil
	case *discoveryv1.EndpointSlice:
		return leanSlice(o), nil
	}
	return obj, nil
}

// leanMeta keeps the identity, the resourceVersion the reflector resumes
// from, and the kept labels and annotations.
func leanMeta(m *metav1.ObjectMeta) metav1.ObjectMeta {
	return metav1.ObjectMeta{
		Name:            m.Name,
		Namespace:       m.Namespace,
		UID:             m.UID,
		ResourceVersion: m.ResourceVersion,
		Labels:          pick(m.Labels, keptLabels),
		Annotations:     pick(m.Annotations, keptAnnotations),
	}
}

// pick returns the entries of m under keys; nil when there are none.
func pick(m map[string]string, keys []string) map[string]string {
	var out map[string]string
	for _, k := range keys {
		if v, ok := m[k]; ok {
			if out == nil {
				out = make(map[string]string, 1)
			}
			out[k] = v
		}
	}
	return out
}

// leanService returns a new Service holding what model.ParseService reads.
func leanService(s *v1.Service) *v1.Service {
	spec := &s.Spec
	out := &v1.Service{
		ObjectMeta: leanMeta(&s.ObjectMeta),
		Spec: v1.ServiceSpec{
			Type:                     spec.Type,
			ClusterIP:                spec.ClusterIP,
			ClusterIPs:               spec.ClusterIPs,
			ExternalIPs:              spec.ExternalIPs,
			LoadBalancerSourceRanges: spec.LoadBalancerSourceRanges,
			SessionAffinity:          spec.SessionAffinity,
			SessionAffinityConfig:    spec.SessionAffinityConfig,
			ExternalTrafficPolicy:    spec.ExternalTrafficPolicy,
			InternalTrafficPolicy:    spec.InternalTrafficPolicy,
			HealthCheckNodePort:      spec.HealthCheckNodePort,
			TrafficDistribution:      spec.TrafficDistribution,
		},
	}
	if len(spec.Ports) > 0 {
		out.Spec.Ports = make([]v1.ServicePort, len(spec.Ports))
		for i, p := range spec.Ports {
			out.Spec.Ports[i] = v1.ServicePort{Name: p.Name, Protocol: p.Protocol, Port: p.Port, NodePort: p.NodePort}
		}
	}
	for _, ing := range s.Status.LoadBalancer.Ingress {
		out.Status.LoadBalancer.Ingress = append(out.Status.LoadBalancer.Ingress,
			v1.LoadBalancerIngress{IP: ing.IP, IPMode: ing.IPMode})
	}
	return out
}

// leanSlice returns a new EndpointSlice holding what the model's slice
// parser reads: per endpoint its first address (the only one that counts),
// conditions, node, zone and hints.
func leanSlice(s *discoveryv1.EndpointSlice) *discoveryv1.EndpointSlice {
	out := &discoveryv1.EndpointSlice{
		ObjectMeta:  leanMeta(&s.ObjectMeta),
		AddressType: s.AddressType,
		Ports:       s.Ports,
	}
	if len(s.Endpoints) > 0 {
		out.Endpoints = make([]discoveryv1.Endpoint, len(s.Endpoints))
		for i := range s.Endpoints {
			e := &s.Endpoints[i]
			addrs := e.Addresses
			if len(addrs) > 1 {
				addrs = []string{addrs[0]} // not the rest's backing array
			}
			out.Endpoints[i] = discoveryv1.Endpoint{
				Addresses:  addrs,
				Conditions: e.Conditions,
				NodeName:   e.NodeName,
				Zone:       e.Zone,
				Hints:      e.Hints,
			}
		}
	}
	return out
}
