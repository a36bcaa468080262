package model

import (
	"errors"
	"slices"
	"testing"

	v1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"

	"github.com/svcproxy/svcproxy/pkg/proxy"
)

func TestParseEndpointSliceConditionsAndHints(t *testing.T) {
	slice := makeSlice("ns", "web-1", "web", nil, func(s *discoveryv1.EndpointSlice) {
		s.Endpoints = []discoveryv1.Endpoint{
			{Addresses: []string{"10.0.0.1", "10.0.0.99"}, NodeName: ptrTo("node-a"), Zone: ptrTo("zone-a"),
				Hints: &discoveryv1.EndpointHints{
					ForZones: []discoveryv1.ForZone{{Name: "zone-a"}},
					ForNodes: []discoveryv1.ForNode{{Name: "node-a"}},
				}},
			{Addresses: []string{"10.0.0.2"}, Conditions: discoveryv1.EndpointConditions{
				Ready: ptrTo(false), Serving: ptrTo(true), Terminating: ptrTo(true)}},
			{Addresses: []string{"10.0.0.3"}, Conditions: discoveryv1.EndpointConditions{
				Ready: ptrTo(false), Serving: ptrTo(false), Terminating: ptrTo(false)}},
			{Addresses: nil},
		}
	})
	parsed, problems, err := parseEndpointSlice(slice, proxy.IPv4, newInterner())
	if err != nil || len(problems) != 0 {
		t.Fatalf("unexpected err %v, problems %v", err, problems)
	}
	eps, _ := parsed.ports.get(keyOf(httpPort))
	if eps.Len() != 3 {
		t.Fatalf("got %d endpoints, want 3 (address-less one dropped)", eps.Len())
	}
	want := []Endpoint{
		{IP: addrs("10.0.0.1")[0], Port: 8080, NodeName: "node-a", Zone: "zone-a", Ready: true, Serving: true,
			ZoneHints: []string{"zone-a"}, NodeHints: []string{"node-a"}},
		{IP: addrs("10.0.0.2")[0], Port: 8080, Serving: true, Terminating: true},
		{IP: addrs("10.0.0.3")[0], Port: 8080},
	}
	for i := range want {
		if got := eps.At(i); !got.Equal(&want[i]) {
			t.Errorf("endpoint %d = %+v, want %+v", i, got, want[i])
		}
	}
}

func TestParseEndpointSlicePorts(t *testing.T) {
	slice := makeSlice("ns", "web-1", "web", []string{"10.0.0.1"}, func(s *discoveryv1.EndpointSlice) {
		s.Ports = []discoveryv1.EndpointPort{
			{Name: ptrTo("http"), Port: ptrTo[int32](8080)},                                    // protocol defaults to TCP
			{Name: ptrTo("dns"), Protocol: ptrTo(v1.ProtocolUDP), Port: ptrTo[int32](53)},      // kept
			{Name: ptrTo("nil"), Protocol: ptrTo(v1.ProtocolTCP)},                              // nil port: skipped
			{Name: ptrTo("zero"), Protocol: ptrTo(v1.ProtocolTCP), Port: ptrTo[int32](0)},      // zero: skipped
			{Name: ptrTo("big"), Protocol: ptrTo(v1.ProtocolTCP), Port: ptrTo[int32](65536)},   // invalid
			{Name: ptrTo("icmp"), Protocol: ptrTo(v1.Protocol("ICMP")), Port: ptrTo[int32](1)}, // invalid
			{Port: ptrTo[int32](9)}, // unnamed port
		}
	})
	parsed, problems, err := parseEndpointSlice(slice, proxy.IPv4, newInterner())
	if err != nil || len(problems) != 2 {
		t.Fatalf("err %v, problems %v; want 2 problems", err, problems)
	}
	var got []proxy.ServicePortName
	for _, pe := range parsed.ports {
		got = append(got, pe.key.in(proxy.ServiceName{Namespace: "ns", Name: parsed.serviceName}))
	}
	slices.SortFunc(got, proxy.ServicePortName.Compare)
	want := []proxy.ServicePortName{
		spn("ns", "web", "", proxy.TCP), spn("ns", "web", "dns", proxy.UDP), httpPort,
	}
	if !slices.Equal(got, want) {
		t.Fatalf("ports %v, want %v", got, want)
	}
}

func TestParseEndpointSliceRejectsSliceWithoutService(t *testing.T) {
	slice := makeSlice("ns", "x", "", []string{"10.0.0.1"}, nil)
	if _, _, err := parseEndpointSlice(slice, proxy.IPv4, newInterner()); !errors.Is(err, errNoServiceName) {
		t.Fatalf("err = %v, want errNoServiceName", err)
	}
}

func TestSliceFamily(t *testing.T) {
	for at, want := range map[discoveryv1.AddressType]proxy.IPFamily{
		discoveryv1.AddressTypeIPv4: proxy.IPv4, discoveryv1.AddressTypeIPv6: proxy.IPv6,
		discoveryv1.AddressTypeFQDN: "", "": "",
	} {
		if got := sliceFamily(&discoveryv1.EndpointSlice{AddressType: at}); got != want {
			t.Errorf("sliceFamily(%q) = %q, want %q", at, got, want)
		}
	}
}
