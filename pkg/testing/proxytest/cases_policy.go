package proxytest

import (
	v1 "k8s.io/api/core/v1"

	"github.com/svcproxy/svcproxy/pkg/pipeline/desired"
)

func policyCases() []Case {
	return append(internalPolicyCases(), externalPolicyCases()...)
}

func internalPolicyCases() []Case {
	return []Case{
		{
			Name:     "internalTrafficPolicy Local with a local endpoint",
			Services: []*v1.Service{service("itp", 30, nodePortType, httpOnly, internalLocal)},
			Slices:   slicesOf("itp", httpSlicePort, localAndRemote),
			Flows: both(func(w World) []Flow {
				return []Flow{
					tcp("cluster IP uses the local endpoint only", w.LocalPod(9), w.ClusterIP(30), httpPort,
						dnat(false, httpTarget, w.LocalPod(1))),
					tcp("node port is not affected", w.ExternalClient, w.NodeIP, httpNodePort,
						dnat(true, httpTarget, w.LocalPod(1), w.RemotePod(1))),
				}
			}),
		},
		{
			Name:     "internalTrafficPolicy Local without a local endpoint",
			Services: []*v1.Service{service("itp", 31, nodePortType, httpOnly, internalLocal)},
			Slices:   slicesOf("itp", httpSlicePort, onlyRemote),
			Flows: both(func(w World) []Flow {
				return []Flow{
					tcp("cluster IP dropped", w.LocalPod(9), w.ClusterIP(31), httpPort, drop),
					tcp("node port still served", w.ExternalClient, w.NodeIP, httpNodePort,
						dnat(true, httpTarget, w.RemotePod(1))),
				}
			}),
		},
	}
}

func externalPolicyCases() []Case {
	return []Case{
		{
			Name:     "externalTrafficPolicy Local with a local endpoint",
			Services: []*v1.Service{service("etp", 32, loadBalancer(6), httpOnly, externalLocal)},
			Slices:   slicesOf("etp", httpSlicePort, localAndRemote),
			Flows: both(func(w World) []Flow {
				local := dnat(false, httpTarget, w.LocalPod(1))
				return []Flow{
					tcp("external to node port keeps source, local only", w.ExternalClient, w.NodeIP, httpNodePort, local),
					tcp("external to LB IP keeps source, local only", w.ExternalClient, w.LoadBalancerIP(6), httpPort, local),
					tcp("pod to LB IP short-circuits to the cluster set", w.RemotePod(9), w.LoadBalancerIP(6), httpPort,
						dnat(false, httpTarget, w.LocalPod(1), w.RemotePod(1))),
					fromHost("host to node port short-circuits, masqueraded", w, w.NodeIP, httpNodePort,
						dnat(true, httpTarget, w.LocalPod(1), w.RemotePod(1))),
					tcp("cluster IP uses the cluster set", w.LocalPod(9), w.ClusterIP(32), httpPort,
						dnat(false, httpTarget, w.LocalPod(1), w.RemotePod(1))),
				}
			}),
		},
		{
			Name:     "externalTrafficPolicy Local without a local endpoint",
			Services: []*v1.Service{service("etp", 33, loadBalancer(7), httpOnly, externalLocal)},
			Slices:   slicesOf("etp", httpSlicePort, onlyRemote),
			Flows: both(func(w World) []Flow {
				remote := dnat(false, httpTarget, w.RemotePod(1))
				return []Flow{
					tcp("external to node port dropped", w.ExternalClient, w.NodeIP, httpNodePort, drop),
					tcp("external to LB IP dropped", w.ExternalClient, w.LoadBalancerIP(7), httpPort, drop),
					tcp("pod to node port short-circuits", w.LocalPod(9), w.NodeIP, httpNodePort, remote),
					fromHost("host to LB IP short-circuits, masqueraded", w, w.LoadBalancerIP(7), httpPort,
						dnat(true, httpTarget, w.RemotePod(1))),
					tcp("cluster IP served", w.LocalPod(9), w.ClusterIP(33), httpPort, remote),
				}
			}),
		},
		{
			Name:     "externalTrafficPolicy Local without a local-traffic detector",
			Services: []*v1.Service{service("etp", 34, nodePortType, httpOnly, externalLocal)},
			Slices:   slicesOf("etp", httpSlicePort, onlyRemote),
			Options:  func(o *desired.Options) { o.ClusterCIDRs = nil },
			Flows: both(func(w World) []Flow {
				return []Flow{
					tcp("pod traffic is not recognized, so dropped", w.LocalPod(9), w.NodeIP, httpNodePort, drop),
					fromHost("host still short-circuits", w, w.NodeIP, httpNodePort, dnat(true, httpTarget, w.RemotePod(1))),
					tcp("off-cluster to cluster IP not masqueraded", w.ExternalClient, w.ClusterIP(34), httpPort,
						dnat(false, httpTarget, w.RemotePod(1))),
				}
			}),
		},
		{
			Name: "internal and external Local together",
			Services: []*v1.Service{service("both", 35, loadBalancer(8), httpOnly, externalLocal, internalLocal,
				func(svc *v1.Service) { svc.Spec.SessionAffinity = v1.ServiceAffinityClientIP })},
			Slices: slicesOf("both", httpSlicePort, localAndRemote),
			Flows: both(func(w World) []Flow {
				local := dnat(false, httpTarget, w.LocalPod(1))
				return []Flow{
					tcp("cluster IP local", w.RemotePod(9), w.ClusterIP(35), httpPort, local),
					tcp("LB IP local", w.ExternalClient, w.LoadBalancerIP(8), httpPort, local),
					tcp("pod to LB IP uses the cluster set", w.RemotePod(9), w.LoadBalancerIP(8), httpPort,
						dnat(false, httpTarget, w.LocalPod(1), w.RemotePod(1))),
				}
			}),
		},
	}
}
