package proxytest

import (
	v1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/utils/ptr"

	"github.com/svcproxy/svcproxy/pkg/pipeline/desired"
	"github.com/svcproxy/svcproxy/pkg/proxy"
)

func nodePortCases() []Case {
	web := func() []*v1.Service { return []*v1.Service{service("np", 10, nodePortType, httpOnly)} }
	eps := func() []*discoveryv1.EndpointSlice { return slicesOf("np", httpSlicePort, onlyRemote) }
	ok := func(w World) Result { return dnat(true, httpTarget, w.RemotePod(1)) }
	withAddrs := func(entries ...string) func(*desired.Options) {
		return func(o *desired.Options) { o.NodePortAddresses = entries }
	}
	return []Case{
		{
			Name: "node port on every local address by default", Services: web(), Slices: eps(),
			Flows: both(func(w World) []Flow {
				return []Flow{
					tcp("node IP", w.ExternalClient, w.NodeIP, httpNodePort, ok(w)),
					tcp("second interface", w.ExternalClient, w.SecondHostIP, httpNodePort, ok(w)),
					tcp("pod to node port is masqueraded", w.LocalPod(9), w.NodeIP, httpNodePort, ok(w)),
					fromHost("host to own node port", w, w.NodeIP, httpNodePort, ok(w)),
					fromHost("not on loopback", w, w.Loopback, httpNodePort, accept),
					tcp("another node's IP is not ours", w.ExternalClient, w.OtherNodeIP, httpNodePort, accept),
					tcp("unused node port", w.ExternalClient, w.NodeIP, httpNodePort+1, accept),
				}
			}),
		},
		{
			Name: "nodePortAddresses primary", Services: web(), Slices: eps(), Options: withAddrs("primary"),
			Flows: both(func(w World) []Flow {
				return []Flow{
					tcp("node IP", w.ExternalClient, w.NodeIP, httpNodePort, ok(w)),
					tcp("second interface refused", w.ExternalClient, w.SecondHostIP, httpNodePort, accept),
				}
			}),
		},
		{
			Name: "nodePortAddresses CIDRs", Services: web(), Slices: eps(),
			Options: withAddrs("192.168.1.0/24", "fd00:2::/64"),
			Flows: both(func(w World) []Flow {
				return []Flow{
					tcp("node IP outside the CIDR", w.ExternalClient, w.NodeIP, httpNodePort, accept),
					tcp("second interface inside the CIDR", w.ExternalClient, w.SecondHostIP, httpNodePort, ok(w)),
				}
			}),
		},
		{
			Name: "nodePortAddresses with one family only", Services: web(), Slices: eps(),
			Options: withAddrs("192.168.1.0/24"),
			Flows: []Flow{
				tcp("IPv4 node IP outside the CIDR", WorldOf(proxy.IPv4).ExternalClient, WorldOf(proxy.IPv4).NodeIP, httpNodePort, accept),
				tcp("IPv6 has no CIDR so every address", WorldOf(proxy.IPv6).ExternalClient, WorldOf(proxy.IPv6).NodeIP, httpNodePort,
					ok(WorldOf(proxy.IPv6))),
			},
		},
		{
			// desired.Options.Localhost is unset: whatever nodePortAddresses
			// says, no backend serves node ports on loopback (the localhost
			// decision, desired/localhost.go; iptables' tests cover DNAT).
			Name: "localhost node ports", Services: web(), Slices: eps(), Options: withAddrs("localhost"),
			Flows: both(func(w World) []Flow {
				lo := fromHost("loopback is not served", w, w.Loopback, httpNodePort, accept)
				lo.Source = w.Loopback
				return []Flow{lo, tcp("node IP refused", w.ExternalClient, w.NodeIP, httpNodePort, accept)}
			}),
		},
	}
}

func externalCases() []Case {
	externalIPs := func(svc *v1.Service) {
		svc.Spec.ExternalIPs = []string{worlds[proxy.IPv4].ExternalIP(1).String(), worlds[proxy.IPv6].ExternalIP(1).String()}
	}
	proxyMode := func(svc *v1.Service) {
		for _, f := range proxy.Families {
			svc.Status.LoadBalancer.Ingress = append(svc.Status.LoadBalancer.Ingress, v1.LoadBalancerIngress{
				IP: worlds[f].LoadBalancerIP(2).String(), IPMode: ptr.To(v1.LoadBalancerIPModeProxy)})
		}
	}
	ranges := func(cidrs ...string) func(*v1.Service) {
		return func(svc *v1.Service) { svc.Spec.LoadBalancerSourceRanges = cidrs }
	}
	all := func(w World) Result { return dnat(true, httpTarget, w.LocalPod(1), w.RemotePod(1)) }
	return []Case{
		{
			Name:     "external IPs",
			Services: []*v1.Service{service("ext", 20, httpOnly, externalIPs)},
			Slices:   slicesOf("ext", httpSlicePort, localAndRemote),
			Flows: both(func(w World) []Flow {
				return []Flow{
					tcp("external client", w.ExternalClient, w.ExternalIP(1), httpPort, all(w)),
					tcp("pod to external IP is masqueraded", w.LocalPod(9), w.ExternalIP(1), httpPort, all(w)),
					tcp("unknown port on external IP", w.ExternalClient, w.ExternalIP(1), 81, accept),
				}
			}),
		},
		{
			Name:     "LB IPs, ipMode Proxy ignored",
			Services: []*v1.Service{service("lb", 21, loadBalancer(1), proxyMode, httpOnly)},
			Slices:   slicesOf("lb", httpSlicePort, localAndRemote),
			Flows: both(func(w World) []Flow {
				return []Flow{
					tcp("VIP ingress", w.ExternalClient, w.LoadBalancerIP(1), httpPort, all(w)),
					tcp("Proxy ingress gets no rules", w.ExternalClient, w.LoadBalancerIP(2), httpPort, accept),
					tcp("node port of the LB service", w.ExternalClient, w.NodeIP, httpNodePort, all(w)),
				}
			}),
		},
		{
			Name:     "loadBalancerSourceRanges",
			Services: []*v1.Service{service("fw", 22, loadBalancer(3), httpOnly, ranges(" 203.0.113.0/24", "2001:db8::/64 "))},
			Slices:   slicesOf("fw", httpSlicePort, localAndRemote),
			Flows: both(func(w World) []Flow {
				return []Flow{
					tcp("allowed client", w.ExternalClient, w.LoadBalancerIP(3), httpPort, all(w)),
					tcp("other client dropped", w.OtherClient, w.LoadBalancerIP(3), httpPort, drop),
					fromHost("node not in a range is dropped", w, w.LoadBalancerIP(3), httpPort, drop),
					tcp("node port not filtered", w.OtherClient, w.NodeIP, httpNodePort, all(w)),
					tcp("cluster IP not filtered", w.OtherClient, w.ClusterIP(22), httpPort, all(w)),
				}
			}),
		},
		{
			Name: "loadBalancerSourceRanges including the node",
			Services: []*v1.Service{service("fwnode", 23, loadBalancer(4), httpOnly,
				ranges("203.0.113.0/24", "192.168.0.0/16", "2001:db8::/64", "fd00:1::/64"))},
			Slices: slicesOf("fwnode", httpSlicePort, localAndRemote),
			Flows: both(func(w World) []Flow {
				fromLB := fromHost("host using the LB IP as source", w, w.LoadBalancerIP(4), httpPort, all(w))
				fromLB.Source = w.LoadBalancerIP(4)
				return []Flow{
					fromHost("host allowed", w, w.LoadBalancerIP(4), httpPort, all(w)),
					fromLB,
					tcp("other client dropped", w.OtherClient, w.LoadBalancerIP(4), httpPort, drop),
				}
			}),
		},
	}
}
