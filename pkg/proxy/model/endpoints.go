package model

import (
	"cmp"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"time"

	v1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"

	"github.com/svcproxy/svcproxy/pkg/proxy"
)

// errNoServiceName marks a slice that names no Service; it cannot be used.
var errNoServiceName = errors.New("EndpointSlice has no " + discoveryv1.LabelServiceName + " label")

// sliceEndpoints is what one EndpointSlice contributes to its Service.
type sliceEndpoints struct {
	service proxy.ServiceName
	// ports maps each of the slice's service ports to its endpoints, in the
	// slice's order.
	ports map[proxy.ServicePortName][]*Endpoint
	// triggerTime is the last-change-trigger-time annotation; zero if absent.
	triggerTime time.Time
}

// sliceFamily returns the IP family of slice's addresses, or "" for FQDN
// (and unknown) slices, which kube-proxy ignores.
func sliceFamily(slice *discoveryv1.EndpointSlice) proxy.IPFamily {
	switch slice.AddressType {
	case discoveryv1.AddressTypeIPv4:
		return proxy.IPv4
	case discoveryv1.AddressTypeIPv6:
		return proxy.IPv6
	}
	return ""
}

// parseEndpointSlice parses a slice of family. Endpoints with an unusable
// address and ports that are nil, zero or invalid are dropped and reported in
// problems; a slice without a service-name label is an error.
func parseEndpointSlice(slice *discoveryv1.EndpointSlice, family proxy.IPFamily) (*sliceEndpoints, []error, error) {
	svcName := slice.Labels[discoveryv1.LabelServiceName]
	if svcName == "" {
		return nil, nil, errNoServiceName
	}
	p := &problemList{}
	out := &sliceEndpoints{
		service:     proxy.ServiceName{Namespace: slice.Namespace, Name: svcName},
		ports:       make(map[proxy.ServicePortName][]*Endpoint, len(slice.Ports)),
		triggerTime: triggerTime(p, slice.Annotations),
	}
	addrs := parseEndpointAddrs(p, slice.Endpoints, family)
	for i := range slice.Ports {
		name, port, err := parseSlicePort(out.service, &slice.Ports[i])
		if err != nil {
			p.add("InvalidEndpointPort", fmt.Sprintf("ports[%d]", i), err)
			continue
		}
		if port == 0 {
			continue // upstream skips nil and zero ports silently
		}
		if _, dup := out.ports[name]; dup {
			p.add("InvalidEndpointPort", fmt.Sprintf("ports[%d]", i), fmt.Errorf("duplicate port %q/%s", name.Port, name.Protocol))
			continue
		}
		eps := make([]*Endpoint, 0, len(addrs))
		for _, a := range addrs {
			ep := *a
			ep.Port = port
			eps = append(eps, &ep)
		}
		out.ports[name] = eps
	}
	return out, p.errs, nil
}

func parseSlicePort(svc proxy.ServiceName, port *discoveryv1.EndpointPort) (proxy.ServicePortName, uint16, error) {
	name := proxy.ServicePortName{ServiceName: svc}
	if port.Name != nil {
		name.Port = *port.Name
	}
	var protocol v1.Protocol
	if port.Protocol != nil {
		protocol = *port.Protocol
	}
	proto, err := parseProtocol(protocol)
	if err != nil {
		return name, 0, fmt.Errorf("port %q: %w", name.Port, err)
	}
	name.Protocol = proto
	if port.Port == nil {
		return name, 0, nil
	}
	if *port.Port < 0 || *port.Port > 65535 {
		return name, 0, fmt.Errorf("port %q: invalid port number %d", name.Port, *port.Port)
	}
	return name, uint16(*port.Port), nil
}

// parseEndpointAddrs returns one port-less Endpoint per usable endpoint.
// Only addresses[0] counts, as in upstream.
func parseEndpointAddrs(p *problemList, endpoints []discoveryv1.Endpoint, family proxy.IPFamily) []*Endpoint {
	out := make([]*Endpoint, 0, len(endpoints))
	for i := range endpoints {
		e := &endpoints[i]
		if len(e.Addresses) == 0 {
			continue
		}
		field := fmt.Sprintf("endpoints[%d].addresses[0]", i)
		ip, err := parseAddr(e.Addresses[0])
		if err != nil {
			p.add("InvalidEndpointAddress", field, err)
			continue
		}
		if !family.Contains(ip) {
			p.add("InvalidEndpointAddress", field, fmt.Errorf("%s is not %s", ip, family))
			continue
		}
		out = append(out, endpointOf(ip, e))
	}
	return out
}

func endpointOf(ip netip.Addr, e *discoveryv1.Endpoint) *Endpoint {
	c := e.Conditions
	ep := &Endpoint{
		IP:          ip,
		Ready:       c.Ready == nil || *c.Ready,
		Serving:     c.Serving == nil || *c.Serving,
		Terminating: c.Terminating != nil && *c.Terminating,
	}
	if e.NodeName != nil {
		ep.NodeName = *e.NodeName
	}
	if e.Zone != nil {
		ep.Zone = *e.Zone
	}
	if e.Hints != nil {
		for _, z := range e.Hints.ForZones {
			ep.ZoneHints = append(ep.ZoneHints, z.Name)
		}
		for _, n := range e.Hints.ForNodes {
			ep.NodeHints = append(ep.NodeHints, n.Name)
		}
	}
	return ep
}

func triggerTime(p *problemList, annotations map[string]string) time.Time {
	s, ok := annotations[v1.EndpointsLastChangeTriggerTime]
	if !ok {
		return time.Time{}
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		p.add("InvalidTriggerTime", "metadata.annotations["+v1.EndpointsLastChangeTriggerTime+"]", err)
		return time.Time{}
	}
	return t
}

// mergeSlices combines the slices of one Service into each service port's
// endpoint list, sorted by address and port. An endpoint listed by several
// slices is kept once: the ready copy wins, else the one from the slice whose
// name sorts first, so the result does not depend on event order.
func mergeSlices(bySlice map[string]*sliceEndpoints) map[proxy.ServicePortName][]*Endpoint {
	names := make([]string, 0, len(bySlice))
	for n := range bySlice {
		names = append(names, n)
	}
	slices.Sort(names)

	chosen := map[proxy.ServicePortName]map[netip.AddrPort]*Endpoint{}
	for _, n := range names {
		for port, eps := range bySlice[n].ports {
			set := chosen[port]
			if set == nil {
				set = make(map[netip.AddrPort]*Endpoint, len(eps))
				chosen[port] = set
			}
			for _, ep := range eps {
				if prev, ok := set[ep.AddrPort()]; !ok || (!prev.Ready && ep.Ready) {
					set[ep.AddrPort()] = ep
				}
			}
		}
	}

	out := make(map[proxy.ServicePortName][]*Endpoint, len(chosen))
	for port, set := range chosen {
		if len(set) == 0 {
			continue // a port without endpoints is the same as no port
		}
		list := make([]*Endpoint, 0, len(set))
		for _, ep := range set {
			list = append(list, ep)
		}
		slices.SortFunc(list, func(a, b *Endpoint) int {
			return cmp.Or(a.IP.Compare(b.IP), cmp.Compare(a.Port, b.Port))
		})
		out[port] = list
	}
	return out
}
