package proxytest

import (
	v1 "k8s.io/api/core/v1"

	"github.com/svcproxy/svcproxy/pkg/proxy"
)

// manyFrontendCases give one service port several external and LB IPs per
// family: backends may lay those out differently from a single external
// frontend (the nftables backend gives them chains of their own).
func manyFrontendCases() []Case {
	externalIPs := func(ns ...int) func(*v1.Service) {
		return func(svc *v1.Service) {
			for _, n := range ns {
				for _, f := range proxy.Families {
					svc.Spec.ExternalIPs = append(svc.Spec.ExternalIPs, worlds[f].ExternalIP(n).String())
				}
			}
		}
	}
	three := func(w World) []EP {
		return append(localAndRemote(w), EP{IP: w.RemotePod(2), Node: OtherNodeName})
	}
	return []Case{
		{
			Name:     "several external IPs and LB IPs",
			Services: []*v1.Service{service("many", 24, loadBalancer(10), loadBalancer(11), externalIPs(10, 11, 12), httpOnly)},
			Slices:   slicesOf("many", httpSlicePort, three),
			Flows: both(func(w World) []Flow {
				all := dnat(true, httpTarget, w.LocalPod(1), w.RemotePod(1), w.RemotePod(2))
				return []Flow{
					tcp("first external IP", w.ExternalClient, w.ExternalIP(10), httpPort, all),
					tcp("last external IP", w.ExternalClient, w.ExternalIP(12), httpPort, all),
					tcp("first LB IP", w.ExternalClient, w.LoadBalancerIP(10), httpPort, all),
					tcp("pod to second LB IP is masqueraded", w.LocalPod(9), w.LoadBalancerIP(11), httpPort, all),
					tcp("node port", w.ExternalClient, w.NodeIP, httpNodePort, all),
					tcp("unknown port on an external IP", w.ExternalClient, w.ExternalIP(11), 81, accept),
					tcp("cluster IP", w.LocalPod(9), w.ClusterIP(24), httpPort,
						dnat(false, httpTarget, w.LocalPod(1), w.RemotePod(1), w.RemotePod(2))),
				}
			}),
		},
		{
			Name: "externalTrafficPolicy Local with several LB IPs",
			Services: []*v1.Service{
				service("manylocal", 25, loadBalancer(12), loadBalancer(13), httpOnly, externalLocal),
				service("manynone", 26, loadBalancer(14), externalIPs(14), httpOnly, externalLocal,
					ports(svcPort("http", v1.ProtocolTCP, httpPort, httpNodePort+1))),
			},
			Slices: append(slicesOf("manylocal", httpSlicePort, three), slicesOf("manynone", httpSlicePort, onlyRemote)...),
			Flows: both(func(w World) []Flow {
				local := dnat(false, httpTarget, w.LocalPod(1))
				cluster := dnat(false, httpTarget, w.LocalPod(1), w.RemotePod(1), w.RemotePod(2))
				remote := dnat(false, httpTarget, w.RemotePod(1))
				return []Flow{
					tcp("external to first LB IP keeps source, local only", w.ExternalClient, w.LoadBalancerIP(12), httpPort, local),
					tcp("external to second LB IP keeps source, local only", w.ExternalClient, w.LoadBalancerIP(13), httpPort, local),
					tcp("external to node port keeps source, local only", w.ExternalClient, w.NodeIP, httpNodePort, local),
					tcp("pod to LB IP short-circuits to the cluster set", w.RemotePod(9), w.LoadBalancerIP(13), httpPort, cluster),
					fromHost("host to LB IP short-circuits, masqueraded", w, w.LoadBalancerIP(12), httpPort,
						dnat(true, httpTarget, w.LocalPod(1), w.RemotePod(1), w.RemotePod(2))),
					tcp("no local endpoint: external to LB IP dropped", w.ExternalClient, w.LoadBalancerIP(14), httpPort, drop),
					tcp("no local endpoint: external to external IP dropped", w.ExternalClient, w.ExternalIP(14), httpPort, drop),
					tcp("no local endpoint: external to node port dropped", w.ExternalClient, w.NodeIP, httpNodePort+1, drop),
					tcp("no local endpoint: pod to external IP short-circuits", w.LocalPod(9), w.ExternalIP(14), httpPort, remote),
					fromHost("no local endpoint: host to LB IP short-circuits, masqueraded", w, w.LoadBalancerIP(14), httpPort,
						dnat(true, httpTarget, w.RemotePod(1))),
				}
			}),
		},
	}
}
