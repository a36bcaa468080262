package proxytest

import (
	"net/netip"

	v1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/utils/ptr"

	"github.com/svcproxy/svcproxy/pkg/proxy"
)

// Cases returns the shared packet-flow table. Each call builds fresh
// objects, so callers may modify what they get.
func Cases() []Case {
	var out []Case
	for _, group := range [][]Case{basicCases(), nodePortCases(), externalCases(), policyCases(),
		terminatingCases(), topologyCases(), masqueradeCases(), manyFrontendCases()} {
		out = append(out, group...)
	}
	return out
}

// The helpers below keep the case tables short. Every case lives in
// namespace "ns1"; its services are dual-stack unless it says otherwise.

const ns = "ns1"

// Common ports: a service port "http" 80 → 8080 with node port 30080.
const (
	httpPort     = 80
	httpTarget   = 8080
	httpNodePort = 30080
)

// service returns a RequireDualStack ClusterIP Service whose cluster IPs are
// the n-th of each family's service CIDR, edited by edits in order.
func service(name string, n int, edits ...func(*v1.Service)) *v1.Service {
	return MakeService(ns, name, func(svc *v1.Service) {
		svc.Spec.ClusterIP = worlds[proxy.IPv4].ClusterIP(n).String()
		svc.Spec.ClusterIPs = []string{svc.Spec.ClusterIP, worlds[proxy.IPv6].ClusterIP(n).String()}
		svc.Spec.IPFamilies = []v1.IPFamily{v1.IPv4Protocol, v1.IPv6Protocol}
		svc.Spec.IPFamilyPolicy = ptr.To(v1.IPFamilyPolicyRequireDualStack)
		for _, edit := range edits {
			edit(svc)
		}
	})
}

// ports sets the Service's ports.
func ports(ps ...v1.ServicePort) func(*v1.Service) {
	return func(svc *v1.Service) { svc.Spec.Ports = append([]v1.ServicePort(nil), ps...) }
}

func svcPort(name string, proto v1.Protocol, port, nodePort int32) v1.ServicePort {
	return v1.ServicePort{Name: name, Protocol: proto, Port: port, NodePort: nodePort}
}

// httpOnly is the single port "http" with node port 30080 (used only when
// the Service type has node ports).
var httpOnly = ports(svcPort("http", v1.ProtocolTCP, httpPort, httpNodePort))

// nodePortType makes the Service type NodePort.
func nodePortType(svc *v1.Service) { svc.Spec.Type = v1.ServiceTypeNodePort }

// loadBalancer makes the Service a LoadBalancer with the n-th LB IP of both
// families as VIP ingress.
func loadBalancer(n int) func(*v1.Service) {
	return func(svc *v1.Service) {
		svc.Spec.Type = v1.ServiceTypeLoadBalancer
		for _, f := range proxy.Families {
			svc.Status.LoadBalancer.Ingress = append(svc.Status.LoadBalancer.Ingress,
				v1.LoadBalancerIngress{IP: worlds[f].LoadBalancerIP(n).String()})
		}
	}
}

func externalLocal(svc *v1.Service) {
	svc.Spec.ExternalTrafficPolicy = v1.ServiceExternalTrafficPolicyLocal
	if svc.Spec.Type == v1.ServiceTypeLoadBalancer {
		svc.Spec.HealthCheckNodePort = 32000
	}
}

func internalLocal(svc *v1.Service) {
	svc.Spec.InternalTrafficPolicy = ptr.To(v1.ServiceInternalTrafficPolicyLocal)
}

// slicesOf returns one EndpointSlice per family for Service name, with ports
// and the endpoints eps returns for each family's world.
func slicesOf(name string, ps []SlicePort, eps func(w World) []EP) []*discoveryv1.EndpointSlice {
	var out []*discoveryv1.EndpointSlice
	for _, f := range proxy.Families {
		s := Slice(ns, name, ps, eps(worlds[f])...)
		s.AddressType = discoveryv1.AddressType(f)
		s.Name = name + "-" + string(f)
		out = append(out, s)
	}
	return out
}

var httpSlicePort = []SlicePort{{Name: "http", Port: httpTarget, Protocol: v1.ProtocolTCP}}

// localAndRemote is one ready pod on this node and one elsewhere.
func localAndRemote(w World) []EP {
	return []EP{{IP: w.LocalPod(1), Node: NodeName}, {IP: w.RemotePod(1), Node: OtherNodeName}}
}

func onlyRemote(w World) []EP { return []EP{{IP: w.RemotePod(1), Node: OtherNodeName}} }

// both builds flows for each family's world, naming each by family.
func both(flows func(w World) []Flow) []Flow {
	var out []Flow
	for _, f := range proxy.Families {
		for _, fl := range flows(worlds[f]) {
			fl.Name = string(f) + ": " + fl.Name
			out = append(out, fl)
		}
	}
	return out
}

// tcp returns a TCP flow from src to dst:port wanting want.
func tcp(name string, src, dst netip.Addr, port uint16, want Result) Flow {
	return Flow{Name: name, Source: src, Protocol: proxy.TCP, Dest: dst, DestPort: port, Want: want}
}

// fromHost returns a flow the node itself sends from its primary IP.
func fromHost(name string, w World, dst netip.Addr, port uint16, want Result) Flow {
	f := tcp(name, w.NodeIP, dst, port, want)
	f.FromHost = true
	return f
}

// dnat is a DNAT to eps (all on port).
func dnat(masq bool, port uint16, eps ...netip.Addr) Result {
	r := Result{Verdict: DNAT, Masquerade: masq}
	for _, ip := range eps {
		r.Endpoints = append(r.Endpoints, netip.AddrPortFrom(ip, port))
	}
	sortAddrPorts(r.Endpoints)
	return r
}

var (
	accept = Result{Verdict: Accept}
	reject = Result{Verdict: Reject}
	drop   = Result{Verdict: Drop}
)
