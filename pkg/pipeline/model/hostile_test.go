package model

import (
	"errors"
	"net/netip"
	"slices"
	"testing"

	v1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"

	"github.com/svcproxy/svcproxy/pkg/proxy"
)

// Addresses as tenants can write them. Upstream parses with k8s.io/utils/net's
// sloppy parser; a zone is never an address; an IPv4-mapped IPv6 address or
// prefix is IPv4, and nothing may reach a set of the other family.
func TestParseAddrHostile(t *testing.T) {
	for _, tt := range []struct {
		in   string
		want string // "" = refused
	}{
		{"10.0.0.1", "10.0.0.1"},
		{"010.000.0.001", "10.0.0.1"},
		{"::ffff:10.0.0.1", "10.0.0.1"},
		{"::ffff:a00:1", "10.0.0.1"},
		{"fe80::1%eth0", ""},
		{"fe80::1%eth0\nflush ruleset", ""},
		{"10.0.0.1%x", ""},
		{" 10.0.0.1", ""},
		{"10.0.0.1/32", ""},
		{"", ""},
		{"2001:DB8::0001", "2001:db8::1"},
	} {
		got, err := parseAddr(tt.in)
		switch {
		case tt.want == "" && err == nil:
			t.Errorf("parseAddr(%q) = %s, want refused", tt.in, got)
		case tt.want != "" && (err != nil || got != netip.MustParseAddr(tt.want)):
			t.Errorf("parseAddr(%q) = %s, %v; want %s", tt.in, got, err, tt.want)
		}
	}
}

func TestParsePrefixHostile(t *testing.T) {
	for _, tt := range []struct {
		in   string
		want string // "" = refused
	}{
		{"010.0.0.0/8", "10.0.0.0/8"},
		{"10.1.2.3/8", "10.0.0.0/8"},
		{"::ffff:10.0.0.0/104", "10.0.0.0/8"},
		{"::ffff:10.1.2.3/128", "10.1.2.3/32"},
		{"::ffff:0:0/96", "0.0.0.0/0"},
		{"::ffff:0:0/80", "::/80"},
		{"fe80::/64%eth0", ""},
		{"fe80::%eth0/64", ""},
		{"10.0.0.0/33", ""},
		{"10.0.0.0", ""},
	} {
		got, err := parsePrefix(tt.in)
		switch {
		case tt.want == "" && err == nil:
			t.Errorf("parsePrefix(%q) = %s, want refused", tt.in, got)
		case tt.want != "" && (err != nil || got != netip.MustParsePrefix(tt.want)):
			t.Errorf("parsePrefix(%q) = %s, %v; want %s", tt.in, got, err, tt.want)
		}
	}
}

// Every address field of a Service goes through the same parser, and each
// family's ports get only that family's addresses, unmapped.
func TestParseServiceHostileAddresses(t *testing.T) {
	svc := makeService("ns", "lb", func(s *v1.Service) {
		s.Spec.Type = v1.ServiceTypeLoadBalancer
		s.Spec.ClusterIP, s.Spec.ClusterIPs = "172.030.0.1", []string{"172.030.0.1"}
		s.Spec.ExternalIPs = []string{"::ffff:203.0.113.1", "fe80::1%lo", "0203.0.113.2"}
		s.Spec.LoadBalancerSourceRanges = []string{"::ffff:10.0.0.0/104", "010.2.0.0/16", "fe80::/10%lo"}
		s.Status.LoadBalancer.Ingress = []v1.LoadBalancerIngress{{IP: "::ffff:198.51.100.1"}}
	})
	for _, family := range proxy.Families {
		ports, problems := ParseService(svc, family)
		if family == proxy.IPv6 {
			if len(ports) != 0 {
				t.Errorf("IPv6: got %d ports of an IPv4-only Service", len(ports))
			}
			continue
		}
		if len(ports) != 1 {
			t.Fatalf("IPv4: got %d ports, want 1 (problems %v)", len(ports), problems)
		}
		sp := ports[0]
		if !slices.Equal(sp.ClusterIPs, addrs("172.30.0.1")) ||
			!slices.Equal(sp.ExternalIPs, addrs("203.0.113.1", "203.0.113.2")) ||
			!slices.Equal(sp.LoadBalancerIPs, addrs("198.51.100.1")) {
			t.Errorf("frontends %v %v %v", sp.ClusterIPs, sp.ExternalIPs, sp.LoadBalancerIPs)
		}
		want := []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("10.2.0.0/16")}
		if !slices.Equal(sp.SourceRanges, want) || !sp.SourceRangesInvalid {
			t.Errorf("ranges %v invalid %v, want %v and invalid", sp.SourceRanges, sp.SourceRangesInvalid, want)
		}
		reasons := map[string]bool{}
		for _, err := range problems {
			var p *Problem
			if !errors.As(err, &p) {
				t.Fatalf("problem %v is not a *Problem", err)
			}
			reasons[p.Reason+" "+p.Field] = true
		}
		for _, r := range []string{"InvalidExternalIP spec.externalIPs[1]", "InvalidLoadBalancerSourceRange spec.loadBalancerSourceRanges[2]"} {
			if !reasons[r] {
				t.Errorf("problems %v lack %q", problems, r)
			}
		}
	}
}

func TestParseEndpointSliceHostileAddresses(t *testing.T) {
	slice := makeSlice("ns", "web-1", "web", []string{"010.0.0.1", "::ffff:10.0.0.2", "fe80::1%eth0", "10.0.0.3%1"}, nil)
	parsed, problems, err := parseEndpointSlice(slice, proxy.IPv4, newInterner())
	if err != nil {
		t.Fatal(err)
	}
	if len(parsed.ports) != 1 {
		t.Fatalf("ports %v, want one", parsed.ports)
	}
	for _, pe := range parsed.ports {
		var got []netip.Addr
		for _, ep := range pe.eps.Addrs() {
			got = append(got, ep.IP)
		}
		if !slices.Equal(got, addrs("10.0.0.1", "10.0.0.2")) {
			t.Errorf("endpoints %v, want 10.0.0.1 and 10.0.0.2", got)
		}
	}
	if len(problems) != 2 {
		t.Errorf("problems %v, want the two zoned addresses", problems)
	}
}

// Endpoint addresses that can be no Service's endpoint: the API server
// accepts some of them (a global multicast address, the limited broadcast
// address, and every one of them in an Endpoints object mirrored into a
// slice). They are dropped at parsing, the others kept, and each is a
// Warning on the slice's Service, not on the slice.
func TestEndpointAddressesNoServiceCanUse(t *testing.T) {
	for _, tt := range []struct {
		family  proxy.IPFamily
		refused []string
		kept    []string
	}{
		{proxy.IPv4,
			[]string{"0.0.0.0", "127.0.0.1", "127.1.2.3", "224.0.0.5", "239.1.2.3", "255.255.255.255", "169.254.169.254", "::ffff:127.0.0.1"},
			[]string{"10.0.0.1", "192.168.0.255", "100.64.0.1"}},
		{proxy.IPv6,
			[]string{"::", "::1", "ff02::1", "ff0e::1", "fe80::1"},
			[]string{"fd00:10::1", "2001:db8::1"}},
	} {
		t.Run(string(tt.family), func(t *testing.T) {
			tracker := NewTracker(tt.family)
			type report struct{ kind, name, reason string }
			var reports []report
			tracker.SetProblemReporter(func(kind, namespace, name string, problems []error) {
				for _, err := range problems {
					var p *Problem
					if !errors.As(err, &p) {
						t.Fatalf("problem %v is not a *Problem", err)
					}
					reports = append(reports, report{kind, namespace + "/" + name, p.Reason})
				}
			})
			tracker.OnServiceUpdate(nil, makeService("ns", "web", nil))
			slice := makeSlice("ns", "web-1", "web", append(slices.Clone(tt.refused), tt.kept...), func(s *discoveryv1.EndpointSlice) {
				if tt.family == proxy.IPv6 {
					s.AddressType = discoveryv1.AddressTypeIPv6
				}
			})
			tracker.OnEndpointSliceUpdate(nil, slice)
			snap, _ := tracker.Commit()
			var got []string
			for _, eps := range snap.Endpoints.All() {
				for _, ep := range eps.Addrs() {
					got = append(got, ep.IP.String())
				}
			}
			slices.Sort(got)
			want := slices.Sorted(slices.Values(tt.kept))
			if !slices.Equal(got, want) {
				t.Errorf("endpoints %v, want %v", got, want)
			}
			wantReport := report{"Service", "ns/web", "RefusedEndpointAddress"}
			if len(reports) != len(tt.refused) {
				t.Errorf("reports %v, want %d of %v", reports, len(tt.refused), wantReport)
			}
			for _, r := range reports {
				if r != wantReport {
					t.Errorf("report %v, want %v", r, wantReport)
				}
			}
		})
	}
}

// Two ports of one Service on the same port number or node port (with the
// same protocol) would be one frontend leading to two places; the API
// server refuses such a Service, the model keeps the first port (found by
// FuzzHostileServices: nft refuses the second map element, the sync fails).
func TestParseServiceDuplicateFrontends(t *testing.T) {
	svc := makeService("ns", "dup", func(s *v1.Service) {
		s.Spec.Type = v1.ServiceTypeNodePort
		s.Spec.Ports = []v1.ServicePort{
			{Name: "http", Protocol: v1.ProtocolTCP, Port: 80, NodePort: 30080},
			{Name: "dns", Port: 80, NodePort: 30081},                               // port 80/TCP again ("" is TCP)
			{Name: "alt", Protocol: v1.ProtocolTCP, Port: 8080, NodePort: 30080},   // node port 30080/TCP again
			{Name: "udp", Protocol: v1.ProtocolUDP, Port: 80, NodePort: 30080},     // other protocol: fine
			{Name: "http2", Protocol: v1.ProtocolTCP, Port: 8443, NodePort: 30443}, // fine
		}
	})
	ports, problems := ParseService(svc, proxy.IPv4)
	var got []string
	for _, sp := range ports {
		got = append(got, sp.Name.Port)
	}
	if want := []string{"http", "udp", "http2"}; !slices.Equal(got, want) {
		t.Errorf("ports %v, want %v", got, want)
	}
	if len(problems) != 2 {
		t.Errorf("problems %v, want the duplicate port number and node port", problems)
	}
}
