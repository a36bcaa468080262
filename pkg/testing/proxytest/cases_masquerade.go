package proxytest

import (
	v1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"

	"github.com/svcproxy/svcproxy/pkg/pipeline/desired"
	"github.com/svcproxy/svcproxy/pkg/proxy"
)

func masqueradeCases() []Case {
	web := func(n int) []*v1.Service { return []*v1.Service{service("masq", n, httpOnly)} }
	eps := slicesOf("masq", httpSlicePort, onlyRemote)
	ok := func(w World, masq bool) Result { return dnat(masq, httpTarget, w.RemotePod(1)) }
	viaInterface := func(f Flow, ifname string) Flow { f.InInterface = ifname; return f }
	return []Case{
		{
			Name: "masqueradeAll", Services: web(60), Slices: eps,
			Options: func(o *desired.Options) { o.MasqueradeAll = true },
			Flows: both(func(w World) []Flow {
				return []Flow{tcp("pod to cluster IP masqueraded", w.LocalPod(9), w.ClusterIP(60), httpPort, ok(w, true))}
			}),
		},
		{
			Name: "detectLocalMode NodeCIDR", Services: web(61), Slices: eps,
			Options: func(o *desired.Options) { o.DetectLocalMode = desired.DetectLocalNodeCIDR },
			Flows: both(func(w World) []Flow {
				return []Flow{
					tcp("pod on this node not masqueraded", w.LocalPod(9), w.ClusterIP(61), httpPort, ok(w, false)),
					tcp("pod elsewhere masqueraded", w.RemotePod(9), w.ClusterIP(61), httpPort, ok(w, true)),
				}
			}),
		},
		{
			Name: "detectLocalMode BridgeInterface", Services: web(62), Slices: eps,
			Options: func(o *desired.Options) {
				o.DetectLocalMode, o.BridgeInterface = desired.DetectLocalBridgeInterface, PodBridge
			},
			Flows: both(func(w World) []Flow {
				return []Flow{
					viaInterface(tcp("from the bridge not masqueraded", w.LocalPod(9), w.ClusterIP(62), httpPort, ok(w, false)), PodBridge),
					viaInterface(tcp("from another interface masqueraded", w.LocalPod(9), w.ClusterIP(62), httpPort, ok(w, true)), "eth0"),
				}
			}),
		},
		{
			Name: "detectLocalMode InterfaceNamePrefix", Services: web(63), Slices: eps,
			Options: func(o *desired.Options) {
				o.DetectLocalMode, o.InterfaceNamePrefix = desired.DetectLocalInterfaceNamePrefix, PodInterfacePrefix
			},
			Flows: both(func(w World) []Flow {
				return []Flow{
					viaInterface(tcp("from a pod interface not masqueraded", w.LocalPod(9), w.ClusterIP(63), httpPort, ok(w, false)), PodInterface),
					viaInterface(tcp("from another interface masqueraded", w.ExternalClient, w.ClusterIP(63), httpPort, ok(w, true)), "eth0"),
				}
			}),
		},
		{
			Name: "session affinity", Slices: slicesOf("sticky", httpSlicePort, localAndRemote),
			Services: []*v1.Service{service("sticky", 64, httpOnly, func(svc *v1.Service) {
				svc.Spec.SessionAffinity = v1.ServiceAffinityClientIP
				svc.Spec.SessionAffinityConfig = &v1.SessionAffinityConfig{ClientIP: &v1.ClientIPConfig{TimeoutSeconds: ptr.To[int32](600)}}
			})},
			Flows: both(func(w World) []Flow {
				return []Flow{tcp("every endpoint possible", w.LocalPod(9), w.ClusterIP(64), httpPort,
					dnat(false, httpTarget, w.LocalPod(1), w.RemotePod(1)))}
			}),
		},
		singleStackCase(),
	}
}

// singleStackCase: an IPv4-only and an IPv6-only Service in the same world;
// each family programs only its own.
func singleStackCase() Case {
	v4, v6 := WorldOf(proxy.IPv4), WorldOf(proxy.IPv6)
	single := func(name string, w World) *v1.Service {
		return service(name, 70, httpOnly, func(svc *v1.Service) {
			svc.Spec.ClusterIP = w.ClusterIP(70).String()
			svc.Spec.ClusterIPs = []string{svc.Spec.ClusterIP}
			svc.Spec.IPFamilies = []v1.IPFamily{v1.IPFamily(w.Family)}
			svc.Spec.IPFamilyPolicy = ptr.To(v1.IPFamilyPolicySingleStack)
		})
	}
	onlyV4 := single("only-v4", v4)
	onlyV6 := single("only-v6", v6)
	onlyV6.Spec.Ports[0].Port = 81
	return Case{
		Name:     "single-stack services in a dual-stack cluster",
		Services: []*v1.Service{onlyV4, onlyV6},
		Slices: append(slicesOf("only-v4", httpSlicePort, onlyRemote)[:1],
			slicesOf("only-v6", httpSlicePort, onlyRemote)[1:]...),
		Flows: []Flow{
			tcp("IPv4 service served", v4.LocalPod(9), v4.ClusterIP(70), httpPort, dnat(false, httpTarget, v4.RemotePod(1))),
			tcp("IPv4 cluster IP has no port 81", v4.LocalPod(9), v4.ClusterIP(70), 81, reject),
			tcp("IPv6 service served", v6.LocalPod(9), v6.ClusterIP(70), 81, dnat(false, httpTarget, v6.RemotePod(1))),
			tcp("IPv6 cluster IP has no port 80", v6.LocalPod(9), v6.ClusterIP(70), httpPort, reject),
		},
	}
}
