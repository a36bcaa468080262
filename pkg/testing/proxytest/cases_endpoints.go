package proxytest

import (
	v1 "k8s.io/api/core/v1"
)

func terminatingCases() []Case {
	return []Case{
		{
			Name:     "terminating fallback in the cluster set",
			Services: []*v1.Service{service("term", 40, nodePortType, httpOnly)},
			Slices: slicesOf("term", httpSlicePort, func(w World) []EP {
				return []EP{
					EP{IP: w.LocalPod(1), Node: NodeName}.AsTerminating(),
					EP{IP: w.RemotePod(1), Node: OtherNodeName}.AsTerminating(),
					{IP: w.RemotePod(2), Node: OtherNodeName, NotReady: true, NotServing: true, Terminating: true},
					{IP: w.RemotePod(3), Node: OtherNodeName, NotReady: true},
				}
			}),
			Flows: both(func(w World) []Flow {
				return []Flow{
					tcp("serving terminating endpoints used", w.LocalPod(9), w.ClusterIP(40), httpPort,
						dnat(false, httpTarget, w.LocalPod(1), w.RemotePod(1))),
				}
			}),
		},
		{
			Name:     "terminating endpoints unused while any is ready",
			Services: []*v1.Service{service("term", 41, httpOnly)},
			Slices: slicesOf("term", httpSlicePort, func(w World) []EP {
				return []EP{EP{IP: w.LocalPod(1), Node: NodeName}.AsTerminating(), {IP: w.RemotePod(1), Node: OtherNodeName}}
			}),
			Flows: both(func(w World) []Flow {
				return []Flow{tcp("ready only", w.LocalPod(9), w.ClusterIP(41), httpPort, dnat(false, httpTarget, w.RemotePod(1)))}
			}),
		},
		{
			Name:     "terminating fallback in the local set",
			Services: []*v1.Service{service("term", 42, loadBalancer(9), httpOnly, externalLocal)},
			Slices: slicesOf("term", httpSlicePort, func(w World) []EP {
				return []EP{EP{IP: w.LocalPod(1), Node: NodeName}.AsTerminating(), {IP: w.RemotePod(1), Node: OtherNodeName}}
			}),
			Flows: both(func(w World) []Flow {
				return []Flow{
					tcp("external uses the local terminating endpoint", w.ExternalClient, w.LoadBalancerIP(9), httpPort,
						dnat(false, httpTarget, w.LocalPod(1))),
					tcp("cluster IP uses the remote ready one", w.LocalPod(9), w.ClusterIP(42), httpPort,
						dnat(false, httpTarget, w.RemotePod(1))),
				}
			}),
		},
		{
			Name:     "terminating but not serving is unusable",
			Services: []*v1.Service{service("term", 43, nodePortType, httpOnly, externalLocal)},
			Slices: slicesOf("term", httpSlicePort, func(w World) []EP {
				return []EP{
					{IP: w.LocalPod(1), Node: NodeName, NotReady: true, NotServing: true, Terminating: true},
					{IP: w.RemotePod(1), Node: OtherNodeName},
				}
			}),
			Flows: both(func(w World) []Flow {
				return []Flow{tcp("external dropped", w.ExternalClient, w.NodeIP, httpNodePort, drop)}
			}),
		},
	}
}

func topologyCases() []Case {
	zoned := func(w World) []EP {
		return []EP{
			{IP: w.LocalPod(1), Node: NodeName, ZoneHints: []string{NodeZone}},
			{IP: w.RemotePod(1), Node: OtherNodeName, ZoneHints: []string{OtherZone}},
			{IP: w.RemotePod(2), Node: "node-c", ZoneHints: []string{NodeZone}},
		}
	}
	preferZone := func(svc *v1.Service) {
		svc.Spec.TrafficDistribution = ptrString(v1.ServiceTrafficDistributionPreferClose)
	}
	preferNode := func(svc *v1.Service) {
		svc.Spec.TrafficDistribution = ptrString(v1.ServiceTrafficDistributionPreferSameNode)
	}
	return []Case{
		topologyCase("PreferSameZone", 50, preferZone, zoned, func(w World) Result {
			return dnat(false, httpTarget, w.LocalPod(1), w.RemotePod(2))
		}),
		topologyCase("zone hints all-or-nothing: one missing", 51, preferZone, func(w World) []EP {
			eps := zoned(w)
			eps[1].ZoneHints = nil
			return eps
		}, func(w World) Result { return dnat(false, httpTarget, w.LocalPod(1), w.RemotePod(1), w.RemotePod(2)) }),
		topologyCase("zone hints: none for this zone", 52, preferZone, func(w World) []EP {
			return []EP{{IP: w.RemotePod(1), Node: OtherNodeName, ZoneHints: []string{OtherZone}},
				{IP: w.RemotePod(2), Node: "node-c", ZoneHints: []string{"zone-c"}}}
		}, func(w World) Result { return dnat(false, httpTarget, w.RemotePod(1), w.RemotePod(2)) }),
		topologyCase("PreferSameNode", 53, preferNode, func(w World) []EP {
			eps := zoned(w)
			eps[0].NodeHints, eps[1].NodeHints, eps[2].NodeHints = []string{NodeName}, []string{OtherNodeName}, []string{"node-c"}
			return eps
		}, func(w World) Result { return dnat(false, httpTarget, w.LocalPod(1)) }),
		topologyCase("node hints not for this node fall back to zone hints", 54, preferNode, func(w World) []EP {
			eps := zoned(w)
			eps[1].NodeHints, eps[2].NodeHints = []string{OtherNodeName}, []string{"node-c"}
			eps = eps[1:]
			return eps
		}, func(w World) Result { return dnat(false, httpTarget, w.RemotePod(2)) }),
	}
}

func topologyCase(name string, n int, edit func(*v1.Service), eps func(World) []EP, want func(World) Result) Case {
	svcName := "topo"
	return Case{
		Name:     name,
		Services: []*v1.Service{service(svcName, n, httpOnly, edit)},
		Slices:   slicesOf(svcName, httpSlicePort, eps),
		Flows: both(func(w World) []Flow {
			return []Flow{tcp("cluster IP", w.LocalPod(9), w.ClusterIP(n), httpPort, want(w))}
		}),
	}
}

func ptrString(s string) *string { return &s }
