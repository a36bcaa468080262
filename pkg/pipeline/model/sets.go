package model

import (
	"cmp"
	"slices"
	"strings"

	"github.com/svcproxy/svcproxy/pkg/proxy"
)

// The tracker holds, per Service and per EndpointSlice, a few entries keyed
// by service port name. They are sorted slices rather than Go maps: a map
// of one entry with this key costs about 800 bytes, which at 10k Services
// was half the model in a heap profile.

// portSet is one Service's service ports, sorted by name.
type portSet []*ServicePort

// get returns the port named name, or nil.
func (s portSet) get(name proxy.ServicePortName) *ServicePort {
	if i, ok := slices.BinarySearchFunc(s, name, func(sp *ServicePort, n proxy.ServicePortName) int {
		return sp.Name.Compare(n)
	}); ok {
		return s[i]
	}
	return nil
}

// sortPorts sorts ports, which the caller owns, into a portSet.
func sortPorts(ports []*ServicePort) portSet {
	slices.SortFunc(ports, func(a, b *ServicePort) int { return a.Name.Compare(b.Name) })
	return ports
}

// portKey names a port within its Service: an endpoint set is one
// Service's, so its entries need not repeat the Service's name.
type portKey struct {
	port     string
	protocol proxy.Protocol
}

// keyOf returns the key of name within its Service.
func keyOf(name proxy.ServicePortName) portKey {
	return portKey{port: name.Port, protocol: name.Protocol}
}

// in returns the name of the port k of svc.
func (k portKey) in(svc proxy.ServiceName) proxy.ServicePortName {
	return proxy.ServicePortName{ServiceName: svc, Port: k.port, Protocol: k.protocol}
}

// compare orders keys as ServicePortName.Compare orders one Service's
// ports.
func (k portKey) compare(o portKey) int {
	return cmp.Or(strings.Compare(k.port, o.port), strings.Compare(string(k.protocol), string(o.protocol)))
}

// portEndpoints is one service port's endpoints, sorted by address and port
// without duplicates.
type portEndpoints struct {
	key portKey
	eps EndpointList
}

// endpointSet is the endpoint lists of one Service or one EndpointSlice,
// sorted by port; no list is empty (a port without endpoints is the same as
// no port).
type endpointSet []portEndpoints

func (s endpointSet) search(k portKey) (int, bool) {
	return slices.BinarySearchFunc(s, k, func(pe portEndpoints, k portKey) int { return pe.key.compare(k) })
}

// get returns the endpoints of port k and whether it has any.
func (s endpointSet) get(k portKey) (EndpointList, bool) {
	if i, ok := s.search(k); ok {
		return s[i].eps, true
	}
	return EndpointList{}, false
}

// with returns s, which the caller owns, with port k's endpoints set to eps
// (removed when eps is empty).
func (s endpointSet) with(k portKey, eps EndpointList) endpointSet {
	i, ok := s.search(k)
	switch {
	case ok && eps.Len() == 0:
		return slices.Delete(s, i, i+1)
	case ok:
		s[i].eps = eps
		return s
	case eps.Len() == 0:
		return s
	}
	return slices.Insert(s, i, portEndpoints{key: k, eps: eps})
}

// namedSlice is one EndpointSlice of a Service, by the slice's name.
type namedSlice struct {
	name      string
	endpoints *sliceEndpoints
}

// sliceList is one Service's EndpointSlices, sorted by name.
type sliceList []namedSlice

func (l sliceList) search(name string) (int, bool) {
	return slices.BinarySearchFunc(l, name, func(s namedSlice, n string) int { return strings.Compare(s.name, n) })
}

// set returns l, which the caller owns, with slice name holding e.
func (l sliceList) set(name string, e *sliceEndpoints) sliceList {
	i, ok := l.search(name)
	if ok {
		l[i].endpoints = e
		return l
	}
	return slices.Insert(l, i, namedSlice{name: name, endpoints: e})
}

// remove returns l, which the caller owns, without slice name.
func (l sliceList) remove(name string) sliceList {
	if i, ok := l.search(name); ok {
		return slices.Delete(l, i, i+1)
	}
	return l
}
