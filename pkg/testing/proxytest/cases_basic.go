package proxytest

import (
	v1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"

	"github.com/svcproxy/svcproxy/pkg/proxy"
)

func basicCases() []Case {
	return []Case{
		{
			Name:     "cluster IP",
			Services: []*v1.Service{service("web", 1, httpOnly)},
			Slices:   slicesOf("web", httpSlicePort, localAndRemote),
			Flows: both(func(w World) []Flow {
				all := []Flow{
					tcp("pod to cluster IP", w.RemotePod(9), w.ClusterIP(1), httpPort,
						dnat(false, httpTarget, w.LocalPod(1), w.RemotePod(1))),
					tcp("external client to cluster IP is masqueraded", w.ExternalClient, w.ClusterIP(1), httpPort,
						dnat(true, httpTarget, w.LocalPod(1), w.RemotePod(1))),
					fromHost("host to cluster IP is masqueraded", w, w.ClusterIP(1), httpPort,
						dnat(true, httpTarget, w.LocalPod(1), w.RemotePod(1))),
					tcp("hairpin: endpoint to its own service", w.LocalPod(1), w.ClusterIP(1), httpPort,
						dnat(true, httpTarget, w.LocalPod(1), w.RemotePod(1))),
					tcp("unknown port on cluster IP", w.RemotePod(9), w.ClusterIP(1), 81, reject),
					tcp("unused address in the service CIDR", w.RemotePod(9), w.ClusterIP(99), httpPort, accept),
				}
				udp := tcp("known port, other protocol on cluster IP", w.RemotePod(9), w.ClusterIP(1), httpPort, reject)
				udp.Protocol = proxy.UDP
				return append(all, udp)
			}),
		},
		{
			Name: "multiport",
			Services: []*v1.Service{service("multi", 2, ports(
				svcPort("http", v1.ProtocolTCP, 80, 0), svcPort("https", v1.ProtocolTCP, 443, 0)))},
			Slices: slicesOf("multi", []SlicePort{{"http", 8080, v1.ProtocolTCP}, {"https", 8443, v1.ProtocolTCP}}, localAndRemote),
			Flows: both(func(w World) []Flow {
				return []Flow{
					tcp("http", w.LocalPod(9), w.ClusterIP(2), 80, dnat(false, 8080, w.LocalPod(1), w.RemotePod(1))),
					tcp("https", w.LocalPod(9), w.ClusterIP(2), 443, dnat(false, 8443, w.LocalPod(1), w.RemotePod(1))),
				}
			}),
		},
		{
			Name: "same port, different protocols",
			Services: []*v1.Service{service("dns", 3, ports(
				svcPort("dns-tcp", v1.ProtocolTCP, 53, 0), svcPort("dns-udp", v1.ProtocolUDP, 53, 0)))},
			Slices: slicesOf("dns", []SlicePort{{"dns-tcp", 5353, v1.ProtocolTCP}, {"dns-udp", 5354, v1.ProtocolUDP}}, onlyRemote),
			Flows: both(func(w World) []Flow {
				u := tcp("UDP", w.LocalPod(9), w.ClusterIP(3), 53, dnat(false, 5354, w.RemotePod(1)))
				u.Protocol = proxy.UDP
				return []Flow{tcp("TCP", w.LocalPod(9), w.ClusterIP(3), 53, dnat(false, 5353, w.RemotePod(1))), u}
			}),
		},
		{
			Name: "UDP and SCTP",
			Services: []*v1.Service{service("datagrams", 4, nodePortType, ports(
				svcPort("syslog", v1.ProtocolUDP, 514, 30514), svcPort("sig", v1.ProtocolSCTP, 3868, 30868)))},
			Slices: slicesOf("datagrams", []SlicePort{{"syslog", 5140, v1.ProtocolUDP}, {"sig", 3868, v1.ProtocolSCTP}}, localAndRemote),
			Flows: both(func(w World) []Flow {
				flows := []Flow{
					tcp("UDP to cluster IP", w.LocalPod(9), w.ClusterIP(4), 514, dnat(false, 5140, w.LocalPod(1), w.RemotePod(1))),
					tcp("SCTP to cluster IP", w.LocalPod(9), w.ClusterIP(4), 3868, dnat(false, 3868, w.LocalPod(1), w.RemotePod(1))),
					tcp("UDP node port", w.ExternalClient, w.NodeIP, 30514, dnat(true, 5140, w.LocalPod(1), w.RemotePod(1))),
					tcp("SCTP node port", w.ExternalClient, w.NodeIP, 30868, dnat(true, 3868, w.LocalPod(1), w.RemotePod(1))),
					tcp("TCP to a UDP node port", w.ExternalClient, w.NodeIP, 30514, accept),
				}
				for i, p := range []proxy.Protocol{proxy.UDP, proxy.SCTP, proxy.UDP, proxy.SCTP, proxy.TCP} {
					flows[i].Protocol = p
				}
				return flows
			}),
		},
		noEndpointsCase(),
	}
}

// noEndpointsCase: a Service whose only endpoint is neither ready nor
// serving rejects on every frontend.
func noEndpointsCase() Case {
	return Case{
		Name: "no usable endpoints rejects on every frontend",
		Services: []*v1.Service{service("empty", 5, loadBalancer(5), httpOnly, func(svc *v1.Service) {
			svc.Spec.ExternalIPs = []string{worlds[proxy.IPv4].ExternalIP(5).String(), worlds[proxy.IPv6].ExternalIP(5).String()}
		})},
		Slices: append(slicesOf("empty", httpSlicePort, func(w World) []EP {
			return []EP{{IP: w.LocalPod(1), Node: NodeName, NotReady: true, NotServing: true, Terminating: true}}
		}), MakeEndpointSlice(ns, "empty", 9, func(s *discoveryv1.EndpointSlice) {})),
		Flows: both(func(w World) []Flow {
			return []Flow{
				tcp("cluster IP", w.LocalPod(9), w.ClusterIP(5), httpPort, reject),
				tcp("external IP", w.ExternalClient, w.ExternalIP(5), httpPort, reject),
				tcp("LB IP", w.ExternalClient, w.LoadBalancerIP(5), httpPort, reject),
				tcp("node port", w.ExternalClient, w.NodeIP, httpNodePort, reject),
				fromHost("node port from the host", w, w.NodeIP, httpNodePort, reject),
			}
		}),
	}
}
