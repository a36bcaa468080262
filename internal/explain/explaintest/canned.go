// Package explaintest holds the State that explain's tests and the tests of
// the backends' kernel object names (internal/backends) read alike.
package explaintest

import (
	"net/netip"

	"github.com/svcproxy/svcproxy/pkg/pipeline/desired"
	"github.com/svcproxy/svcproxy/pkg/pipeline/model"
	"github.com/svcproxy/svcproxy/pkg/proxy"
)

// PortName is the name of port of the Service ns/name.
func PortName(ns, name, port string, proto proxy.Protocol) proxy.ServicePortName {
	return proxy.ServicePortName{ServiceName: proxy.ServiceName{Namespace: ns, Name: name}, Port: port, Protocol: proto}
}

// Endpoints parses address:port pairs.
func Endpoints(s ...string) []desired.Endpoint {
	var out []desired.Endpoint
	for _, a := range s {
		ap := netip.MustParseAddrPort(a)
		out = append(out, desired.Endpoint{IP: ap.Addr(), Port: ap.Port()})
	}
	return out
}

var a = netip.MustParseAddr

// State: web (eTP Local, LB with source ranges, node port, one local and
// one remote endpoint), api (iTP Local, no local endpoint), empty (no
// endpoints at all), sticky (ClientIP affinity); IPv4, node 192.168.0.10,
// pods in 10.244.0.0/16.
func State() *desired.State {
	web := PortName("default", "web", "http", proxy.TCP)
	api := PortName("default", "api", "", proxy.TCP)
	empty := PortName("default", "empty", "", proxy.UDP)
	sticky := PortName("default", "sticky", "", proxy.TCP)
	all := Endpoints("10.244.1.5:8080", "10.244.2.7:8080")
	return &desired.State{
		Family:    proxy.IPv4,
		NodeIPs:   []netip.Addr{a("192.168.0.10")},
		NodePorts: desired.NodePortAddrs{IPs: []netip.Addr{a("192.168.0.10")}},
		Masquerade: desired.Masquerade{Mark: 0x4000, Local: desired.LocalDetector{
			Mode: desired.LocalCIDR, CIDRs: []netip.Prefix{netip.MustParsePrefix("10.244.0.0/16")}}},
		Services: model.NewPortMap(map[proxy.ServicePortName]*desired.ServicePort{
			web: {Name: web, Protocol: proxy.TCP, Port: 80, ClusterIP: a("10.96.0.10"), NodePort: 30080,
				ExternalIPs: []netip.Addr{a("198.51.100.1")}, LoadBalancerIPs: []netip.Addr{a("203.0.113.5")},
				AllowedSources: []netip.Prefix{netip.MustParsePrefix("203.0.113.0/24"), netip.MustParsePrefix("198.18.0.0/15")},
				Internal:       desired.Dispatch{Endpoints: all}, Cluster: desired.Dispatch{Endpoints: all},
				External:      desired.Dispatch{Endpoints: Endpoints("10.244.1.5:8080")},
				ExternalLocal: true, HealthCheckNodePort: 31000},
			api: {Name: api, Protocol: proxy.TCP, Port: 443, ClusterIP: a("10.96.0.20"),
				Internal: desired.Dispatch{Empty: desired.Drop}, Cluster: desired.Dispatch{Endpoints: Endpoints("10.244.2.9:6443")},
				External: desired.Dispatch{Endpoints: Endpoints("10.244.2.9:6443")}, InternalLocal: true},
			empty: {Name: empty, Protocol: proxy.UDP, Port: 53, ClusterIP: a("10.96.0.30"), NodePort: 30053,
				Internal: desired.Dispatch{Empty: desired.Reject}, External: desired.Dispatch{Empty: desired.Reject},
				Cluster: desired.Dispatch{Empty: desired.Reject}},
			sticky: {Name: sticky, Protocol: proxy.TCP, Port: 80, ClusterIP: a("10.96.0.40"), AffinitySeconds: 10800,
				Internal: desired.Dispatch{Endpoints: all}, External: desired.Dispatch{Endpoints: all}, Cluster: desired.Dispatch{Endpoints: all}},
		}),
	}
}
