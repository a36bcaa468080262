package model

import (
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"

	"github.com/svcproxy/svcproxy/pkg/proxy"
)

func TestParseServiceSkips(t *testing.T) {
	cases := map[string]func(*v1.Service){
		"headless None": func(s *v1.Service) {
			s.Spec.ClusterIP = v1.ClusterIPNone
			s.Spec.ClusterIPs = []string{v1.ClusterIPNone}
		},
		"headless empty": func(s *v1.Service) { s.Spec.ClusterIP = ""; s.Spec.ClusterIPs = nil },
		"ExternalName":   func(s *v1.Service) { s.Spec.Type = v1.ServiceTypeExternalName },
		"other family only": func(s *v1.Service) {
			s.Spec.ClusterIP = "fd00:30::1"
			s.Spec.ClusterIPs = []string{"fd00:30::1"}
		},
	}
	for name, tweak := range cases {
		if ports, _ := ParseService(makeService("ns", "web", tweak), proxy.IPv4); len(ports) != 0 {
			t.Errorf("%s: got %d ports, want the service skipped", name, len(ports))
		}
	}
}

func TestParseServiceFrontends(t *testing.T) {
	svc := makeService("ns", "web", func(s *v1.Service) {
		s.Spec.Type = v1.ServiceTypeLoadBalancer
		s.Spec.ClusterIPs = []string{"172.30.0.1", "fd00:30::1"}
		s.Spec.ExternalIPs = []string{"203.0.113.1", "bogus", "2001:db8::1"}
		s.Spec.LoadBalancerSourceRanges = []string{" 203.0.113.0/24 ", "10.1.2.3/8", "2001:db8::/32", "nope"}
		vip, proxyMode := v1.LoadBalancerIPModeVIP, v1.LoadBalancerIPModeProxy
		s.Status.LoadBalancer.Ingress = []v1.LoadBalancerIngress{
			{IP: "198.51.100.1"},
			{IP: "198.51.100.2", IPMode: &vip},
			{IP: "198.51.100.3", IPMode: &proxyMode},
			{Hostname: "lb.example.com"},
		}
		s.Spec.Ports = []v1.ServicePort{
			{Name: "dns", Protocol: v1.ProtocolUDP, Port: 53, NodePort: 30053},
			{Name: "sctp", Protocol: v1.ProtocolSCTP, Port: 9},
			{Name: "web", Port: 80}, // protocol defaults to TCP
			{Name: "icmp", Protocol: "ICMP", Port: 1},
			{Name: "zero", Protocol: v1.ProtocolTCP, Port: 0},
			{Name: "dns", Protocol: v1.ProtocolUDP, Port: 54},
		}
	})
	ports, problems := ParseService(svc, proxy.IPv4)
	// bogus externalIP, bad range, ICMP port, zero port, duplicate dns/UDP.
	if len(problems) != 5 {
		t.Errorf("got %d problems, want 5: %v", len(problems), problems)
	}
	var names []string
	for _, p := range ports {
		names = append(names, p.Name.Port+"/"+string(p.Name.Protocol))
	}
	if want := []string{"dns/UDP", "sctp/SCTP", "web/TCP"}; !slices.Equal(names, want) {
		t.Fatalf("ports %v, want %v", names, want)
	}
	dns := ports[0]
	if dns.Port != 53 || dns.NodePort != 30053 {
		t.Errorf("dns port %d nodePort %d", dns.Port, dns.NodePort)
	}
	if !slices.Equal(dns.ClusterIPs, addrs("172.30.0.1")) ||
		!slices.Equal(dns.ExternalIPs, addrs("203.0.113.1")) ||
		!slices.Equal(dns.LoadBalancerIPs, addrs("198.51.100.1", "198.51.100.2")) {
		t.Errorf("frontends %v %v %v", dns.ClusterIPs, dns.ExternalIPs, dns.LoadBalancerIPs)
	}
	wantRanges := []netip.Prefix{netip.MustParsePrefix("203.0.113.0/24"), netip.MustParsePrefix("10.0.0.0/8")}
	if !slices.Equal(dns.SourceRanges, wantRanges) {
		t.Errorf("source ranges %v, want %v", dns.SourceRanges, wantRanges)
	}
}

func TestParseServicePolicies(t *testing.T) {
	local := v1.ServiceInternalTrafficPolicyLocal
	cases := []struct {
		name  string
		tweak func(*v1.Service)
		check func(*ServicePort) bool
	}{
		{"eTP Local ignored for plain ClusterIP",
			func(s *v1.Service) { s.Spec.ExternalTrafficPolicy = v1.ServiceExternalTrafficPolicyLocal },
			func(p *ServicePort) bool { return !p.ExternalLocal }},
		{"eTP Local with externalIPs",
			func(s *v1.Service) {
				s.Spec.ExternalTrafficPolicy = v1.ServiceExternalTrafficPolicyLocal
				s.Spec.ExternalIPs = []string{"203.0.113.1"}
			},
			func(p *ServicePort) bool { return p.ExternalLocal && p.HealthCheckNodePort == 0 }},
		{"eTP Local NodePort has no health check port",
			func(s *v1.Service) {
				s.Spec.Type = v1.ServiceTypeNodePort
				s.Spec.ExternalTrafficPolicy = v1.ServiceExternalTrafficPolicyLocal
				s.Spec.HealthCheckNodePort = 31000
			},
			func(p *ServicePort) bool { return p.ExternalLocal && p.HealthCheckNodePort == 0 }},
		{"eTP Local LoadBalancer has a health check port",
			func(s *v1.Service) {
				s.Spec.Type = v1.ServiceTypeLoadBalancer
				s.Spec.ExternalTrafficPolicy = v1.ServiceExternalTrafficPolicyLocal
				s.Spec.HealthCheckNodePort = 31000
			},
			func(p *ServicePort) bool { return p.ExternalLocal && p.HealthCheckNodePort == 31000 }},
		{"eTP Cluster LoadBalancer has no health check port",
			func(s *v1.Service) { s.Spec.Type = v1.ServiceTypeLoadBalancer; s.Spec.HealthCheckNodePort = 31000 },
			func(p *ServicePort) bool { return !p.ExternalLocal && p.HealthCheckNodePort == 0 }},
		{"iTP Local",
			func(s *v1.Service) { s.Spec.InternalTrafficPolicy = &local },
			func(p *ServicePort) bool { return p.InternalLocal }},
		{"ClientIP affinity defaults to 10800",
			func(s *v1.Service) { s.Spec.SessionAffinity = v1.ServiceAffinityClientIP },
			func(p *ServicePort) bool { return p.AffinitySeconds == 10800 }},
		{"ClientIP affinity timeout",
			func(s *v1.Service) {
				s.Spec.SessionAffinity = v1.ServiceAffinityClientIP
				s.Spec.SessionAffinityConfig = &v1.SessionAffinityConfig{ClientIP: &v1.ClientIPConfig{TimeoutSeconds: ptrTo[int32](60)}}
			},
			func(p *ServicePort) bool { return p.AffinitySeconds == 60 }},
		{"no affinity",
			func(s *v1.Service) {
				s.Spec.SessionAffinityConfig = &v1.SessionAffinityConfig{ClientIP: &v1.ClientIPConfig{TimeoutSeconds: ptrTo[int32](60)}}
			},
			func(p *ServicePort) bool { return p.AffinitySeconds == 0 }},
	}
	for _, tc := range cases {
		ports, _ := ParseService(makeService("ns", "web", tc.tweak), proxy.IPv4)
		if len(ports) != 1 || !tc.check(ports[0]) {
			t.Errorf("%s: got %+v", tc.name, ports)
		}
	}
}

func TestParseServiceTrafficDistribution(t *testing.T) {
	cases := []struct {
		dist        *string
		annotations map[string]string
		want        TrafficDistribution
	}{
		{nil, nil, DistributeAnywhere},
		{ptrTo(v1.ServiceTrafficDistributionPreferClose), nil, DistributePreferZone},
		{ptrTo(v1.ServiceTrafficDistributionPreferSameZone), nil, DistributePreferZone},
		{ptrTo(v1.ServiceTrafficDistributionPreferSameNode), nil, DistributePreferSameNode},
		{ptrTo("SomethingNew"), nil, DistributeAnywhere},
		{nil, map[string]string{v1.AnnotationTopologyMode: "Auto"}, DistributePreferZone},
		{nil, map[string]string{v1.AnnotationTopologyMode: "Disabled"}, DistributeAnywhere},
		{nil, map[string]string{v1.DeprecatedAnnotationTopologyAwareHints: "auto"}, DistributePreferZone},
		{ptrTo(v1.ServiceTrafficDistributionPreferSameNode), map[string]string{v1.AnnotationTopologyMode: "Auto"}, DistributePreferSameNode},
	}
	for i, tc := range cases {
		svc := makeService("ns", "web", func(s *v1.Service) {
			s.Spec.TrafficDistribution = tc.dist
			s.Annotations = tc.annotations
		})
		ports, _ := ParseService(svc, proxy.IPv4)
		if len(ports) != 1 || ports[0].TrafficDistribution != tc.want {
			t.Errorf("case %d: got %+v, want %q", i, ports, tc.want)
		}
	}
	for d, want := range map[TrafficDistribution]string{DistributeAnywhere: "", DistributePreferZone: "PreferSameZone", DistributePreferSameNode: "PreferSameNode"} {
		if d.String() != want {
			t.Errorf("%d names itself %q, want %q", d, d.String(), want)
		}
	}
}

// TestParseServiceExternalBalancing: the annotation's algorithm, in any
// case; an unknown value is a problem named after the field and leaves
// the choice to the node, as an absent or blank one does.
func TestParseServiceExternalBalancing(t *testing.T) {
	for _, tc := range []struct {
		value   *string
		want    proxy.Balancing
		problem bool
	}{
		{nil, proxy.BalanceDefault, false},
		{ptrTo(" "), proxy.BalanceDefault, false},
		{ptrTo("maglev"), proxy.BalanceMaglev, false},
		{ptrTo(" Maglev "), proxy.BalanceMaglev, false},
		{ptrTo("random"), proxy.BalanceRandom, false},
		{ptrTo("ring-hash"), proxy.BalanceDefault, true},
		{ptrTo("maglev\n; drop"), proxy.BalanceDefault, true},
	} {
		svc := makeService("ns", "web", func(s *v1.Service) {
			if tc.value != nil {
				s.Annotations = map[string]string{ExternalBalancingAnnotation: *tc.value}
			}
		})
		ports, problems := ParseService(svc, proxy.IPv4)
		if len(ports) != 1 || ports[0].ExternalBalancing != tc.want {
			t.Errorf("annotation %v: got %+v, want %v", tc.value, ports, tc.want)
		}
		var p *Problem
		if got := len(problems) == 1 && errors.As(problems[0], &p) && p.Reason == "InvalidExternalLBAlgorithm"; got != tc.problem {
			t.Errorf("annotation %v: problems %v; want an InvalidExternalLBAlgorithm: %t", tc.value, problems, tc.problem)
		}
	}
}

// TestParseServiceExternalForwarding: the annotation's method, in any
// case; an unknown value is a problem named after the field and leaves the
// choice to the node, as an absent or blank one does. The annotation is
// decided here for every mode, so it is not an extension a mode reads, and
// Equal tells two ports apart by it.
func TestParseServiceExternalForwarding(t *testing.T) {
	for value, want := range map[string]struct {
		forwarding proxy.Forwarding
		problem    bool
	}{
		" ":        {proxy.ForwardDefault, false},
		"dsr":      {proxy.ForwardDSR, false},
		" DSR ":    {proxy.ForwardDSR, false},
		"snat":     {proxy.ForwardSNAT, false},
		"ipip":     {proxy.ForwardDefault, true},
		"dsr\n; x": {proxy.ForwardDefault, true},
	} {
		svc := makeService("ns", "web", func(s *v1.Service) {
			s.Annotations = map[string]string{ExternalForwardingAnnotation: value}
		})
		ports, problems := ParseService(svc, proxy.IPv4)
		if len(ports) != 1 {
			t.Fatalf("annotation %q: %d ports", value, len(ports))
		}
		if got := ports[0]; got.ExternalForwarding != want.forwarding || got.Extensions != nil {
			t.Errorf("annotation %q: forwarding %q, extensions %v; want %q and none", value, got.ExternalForwarding, got.Extensions, want.forwarding)
		}
		var p *Problem
		if got := len(problems) == 1 && errors.As(problems[0], &p) && p.Reason == "InvalidExternalForwarding"; got != want.problem {
			t.Errorf("annotation %q: problems %v; want an InvalidExternalForwarding: %t", value, problems, want.problem)
		}
	}
	plain, _ := ParseService(makeService("ns", "web", nil), proxy.IPv4)
	dsr, _ := ParseService(makeService("ns", "web", func(s *v1.Service) {
		s.Annotations = map[string]string{ExternalForwardingAnnotation: "dsr"}
	}), proxy.IPv4)
	if plain[0].ExternalForwarding != proxy.ForwardDefault || plain[0].Equal(dsr[0]) {
		t.Errorf("without the annotation %v, Equal to the dsr port: %t", plain[0].ExternalForwarding, plain[0].Equal(dsr[0]))
	}
}

// TestParseServiceBoundsExtensions: a Service filled with annotations under
// svcproxy's domain keeps a few of them, the same ones whatever the order
// the API lists them in, each value bounded and still one no mode accepts.
func TestParseServiceBoundsExtensions(t *testing.T) {
	huge := strings.Repeat("x", 100000)
	svc := makeService("ns", "web", func(s *v1.Service) {
		s.Annotations = map[string]string{"ipvs.svcproxy.io/scheduler": "rr", "other.example/keep": "no"}
		for i := range 5000 {
			s.Annotations[fmt.Sprintf("zz%05d.svcproxy.io/junk", i)] = huge
		}
		s.Annotations["a.svcproxy.io/long"] = "rr" + huge
	})
	ports, _ := ParseService(svc, proxy.IPv4)
	if len(ports) != 1 {
		t.Fatalf("got %d ports", len(ports))
	}
	ext := ports[0].Extensions
	if len(ext) != maxExtensions {
		t.Errorf("kept %d extension annotations, want %d", len(ext), maxExtensions)
	}
	if ext["ipvs.svcproxy.io/scheduler"] != "rr" {
		t.Errorf("the scheduler annotation, first in order, was not kept as it is: %q", ext["ipvs.svcproxy.io/scheduler"])
	}
	long := ext["a.svcproxy.io/long"]
	if len(long) > maxExtensionValue+len("…") || long == "rr" || !strings.HasSuffix(long, "…") {
		t.Errorf("a long value kept as %d bytes %.10q…, want it cut short and marked", len(long), long)
	}
	for k, v := range ext {
		if len(v) > maxExtensionValue+len("…") {
			t.Errorf("%s kept %d bytes", k, len(v))
		}
	}
	again, _ := ParseService(svc, proxy.IPv4)
	if !maps.Equal(again[0].Extensions, ext) {
		t.Error("a second parse kept other annotations")
	}
}
