package model

import (
	"errors"
	"fmt"
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
	// serviceName names the slice's Service, which is in the slice's
	// namespace.
	serviceName string
	// ports holds each of the slice's service ports that has endpoints,
	// with its endpoints deduplicated as mergeSlices would (so that a
	// Service with one slice uses these lists as they are).
	ports endpointSet
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
// problems; a slice without a service-name label is an error. Names are
// shared through in.
func parseEndpointSlice(slice *discoveryv1.EndpointSlice, family proxy.IPFamily, in *interner) (*sliceEndpoints, []error, error) {
	svcName := slice.Labels[discoveryv1.LabelServiceName]
	if svcName == "" {
		return nil, nil, errNoServiceName
	}
	p := &problemList{}
	out := &sliceEndpoints{
		serviceName: svcName,
		ports:       make(endpointSet, 0, len(slice.Ports)),
		triggerTime: triggerTime(p, slice.Annotations),
	}
	// The endpoints are sorted and deduplicated once: each port's list is
	// them on that port, and all of them share one list of infos.
	entries := dedupe(parseEndpointAddrs(p, slice, family, in))
	var infos []*EndpointInfo
	for i := range slice.Ports {
		key, port, err := parseSlicePort(&slice.Ports[i])
		if err != nil {
			p.add("InvalidEndpointPort", fmt.Sprintf("ports[%d]", i), err)
			continue
		}
		if port == 0 {
			continue // upstream skips nil and zero ports silently
		}
		if _, dup := out.ports.get(key); dup {
			p.add("InvalidEndpointPort", fmt.Sprintf("ports[%d]", i), fmt.Errorf("duplicate port %q/%s", key.port, key.protocol))
			continue
		}
		if infos == nil {
			infos = infosOf(entries)
		}
		key.port = in.str(key.port)
		out.ports = out.ports.with(key, onPort(entries, infos, port))
	}
	return out, p.errs, nil
}

func parseSlicePort(port *discoveryv1.EndpointPort) (portKey, uint16, error) {
	var key portKey
	if port.Name != nil {
		key.port = *port.Name
	}
	var protocol v1.Protocol
	if port.Protocol != nil {
		protocol = *port.Protocol
	}
	proto, err := parseProtocol(protocol)
	if err != nil {
		return key, 0, fmt.Errorf("port %q: %w", key.port, err)
	}
	key.protocol = proto
	if port.Port == nil {
		return key, 0, nil
	}
	if *port.Port < 0 || *port.Port > 65535 {
		return key, 0, fmt.Errorf("port %q: invalid port number %d", key.port, *port.Port)
	}
	return key, uint16(*port.Port), nil
}

// parseEndpointAddrs returns one port-less entry per usable endpoint of
// slice. Only addresses[0] counts, as in upstream. An address that does
// not parse is the slice's problem; one that parses but can be nobody's
// endpoint (refuseEndpointAddr) is reported on the slice's Service.
func parseEndpointAddrs(p *problemList, slice *discoveryv1.EndpointSlice, family proxy.IPFamily, in *interner) []entry {
	endpoints := slice.Endpoints
	out := make([]entry, 0, len(endpoints))
	for i := range endpoints {
		e := &endpoints[i]
		if len(e.Addresses) == 0 {
			continue
		}
		ip, err := parseAddr(e.Addresses[0])
		if err == nil && !family.Contains(ip) {
			err = fmt.Errorf("%s is not %s", ip, family)
		}
		if err != nil {
			p.add("InvalidEndpointAddress", fmt.Sprintf("endpoints[%d].addresses[0]", i), err)
			continue
		}
		if err := refuseEndpointAddr(ip); err != nil {
			p.addFor(slice.Labels[discoveryv1.LabelServiceName], "RefusedEndpointAddress",
				fmt.Sprintf("EndpointSlice %s endpoints[%d].addresses[0]", slice.Name, i), err)
			continue
		}
		out = append(out, entry{addr: proxy.Endpoint{IP: ip}, info: infoOf(e, in)})
	}
	return out
}

func infoOf(e *discoveryv1.Endpoint, in *interner) *EndpointInfo {
	c := e.Conditions
	want := EndpointInfo{
		Ready:       c.Ready == nil || *c.Ready,
		Serving:     c.Serving == nil || *c.Serving,
		Terminating: c.Terminating != nil && *c.Terminating,
	}
	if e.NodeName != nil {
		want.NodeName = *e.NodeName
	}
	if e.Zone != nil {
		want.Zone = *e.Zone
	}
	if e.Hints != nil {
		want.ZoneHints = hintNames(e.Hints.ForZones, func(z discoveryv1.ForZone) string { return z.Name })
		want.NodeHints = hintNames(e.Hints.ForNodes, func(n discoveryv1.ForNode) string { return n.Name })
	}
	return in.info(want)
}

// hintNames returns the names of hints; nil when there are none.
func hintNames[H any](hints []H, name func(H) string) []string {
	var out []string
	for _, h := range hints {
		out = append(out, name(h))
	}
	return out
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

// mergeSlices combines the slices of one Service, sorted by name, into each
// service port's endpoint list, sorted by address and port. An endpoint
// listed by several slices is kept once: the ready copy wins, else the one
// from the slice whose name sorts first, so the result does not depend on
// event order. The set of a Service with one slice is that slice's own; the
// caller may only replace its lists by equal ones.
func mergeSlices(bySlice sliceList) endpointSet {
	switch len(bySlice) {
	case 0:
		return nil
	case 1:
		return bySlice[0].endpoints.ports
	}
	all := map[portKey][]entry{}
	for _, s := range bySlice {
		for _, pe := range s.endpoints.ports {
			all[pe.key] = pe.eps.appendEntries(all[pe.key])
		}
	}
	out := make(endpointSet, 0, len(all))
	for key, entries := range all {
		out = append(out, portEndpoints{key: key, eps: listOf(dedupe(entries))})
	}
	slices.SortFunc(out, func(a, b portEndpoints) int { return a.key.compare(b.key) })
	return out
}
