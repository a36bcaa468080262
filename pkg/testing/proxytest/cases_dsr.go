package proxytest

import (
	"net/netip"

	v1 "k8s.io/api/core/v1"

	"github.com/svcproxy/svcproxy/pkg/pipeline/desired"
	"github.com/svcproxy/svcproxy/pkg/pipeline/model"
	"github.com/svcproxy/svcproxy/pkg/proxy"
)

// DSRCases is the packet-flow table of direct server return: node-a runs
// with Options.DSR (ebpf mode's tc programs with --bpf-dsr) and node-b is
// its peer; node-c, which hosts endpoints too, is not. Only a datapath
// that tunnels passes them (desired's Evaluate, and ebpf mode's tc
// programs); every other tracer passes Cases, where nothing tunnels. Each
// call builds fresh objects.
//
// Flows from outside to a dsr port tunnel its endpoints on node-b
// (Result.Tunneled) and masquerade the others; FromPeer flows are what
// node-b tunnels to node-a, served by node-a's own endpoints.
func DSRCases() []Case {
	return append(dsrTunnelCases(), dsrNotAppliedCases()...)
}

// OtherNodeName's pods here are RemotePod(1) and RemotePod(2); NotPeerName's
// is RemotePod(3).
const NotPeerName = "node-c"

// dsrWorld is the node-a pod, the two node-b pods and the node-c pod.
func dsrWorld(w World) []EP {
	return []EP{{IP: w.LocalPod(1), Node: NodeName}, {IP: w.RemotePod(1), Node: OtherNodeName},
		{IP: w.RemotePod(2), Node: OtherNodeName}, {IP: w.RemotePod(3), Node: NotPeerName}}
}

// dsrOn is a node with --bpf-dsr whose default forwarding is snat.
func dsrOn(o *desired.Options) { o.DSR = true }

// forwarding annotates the Service with svcproxy.io/external-forwarding.
func forwarding(f proxy.Forwarding) func(*v1.Service) {
	return func(svc *v1.Service) {
		svc.Annotations = map[string]string{model.ExternalForwardingAnnotation: f.String()}
	}
}

// tunneled is a DNAT to eps (all on port) whose endpoints tun are reached
// by tunnel, the others masqueraded (when there are any).
func tunneled(port uint16, eps []netip.Addr, tun ...netip.Addr) Result {
	r := dnat(len(tun) < len(eps), port, eps...)
	for _, ip := range tun {
		r.Tunneled = append(r.Tunneled, netip.AddrPortFrom(ip, port))
	}
	sortAddrPorts(r.Tunneled)
	return r
}

// fromPeer is a flow of the external client that a peer tunnelled here.
func fromPeer(name string, w World, dst netip.Addr, port uint16, want Result) Flow {
	f := tcp(name, w.ExternalClient, dst, port, want)
	f.FromPeer = true
	return f
}

func dsrTunnelCases() []Case {
	peers := func() []*v1.Node { return []*v1.Node{MakeNode(OtherNodeName, nil)} }
	externalIP := func(svc *v1.Service) {
		svc.Spec.ExternalIPs = []string{worlds[proxy.IPv4].ExternalIP(30).String(), worlds[proxy.IPv6].ExternalIP(30).String()}
	}
	ranges := func(svc *v1.Service) {
		svc.Spec.LoadBalancerSourceRanges = []string{worlds[proxy.IPv4].ExternalClient.String() + "/32",
			worlds[proxy.IPv6].ExternalClient.String() + "/128"}
	}
	return []Case{{
		Name: "DSR: endpoints on a peer are tunnelled, the others masqueraded",
		Services: []*v1.Service{service("dsr", 30, loadBalancer(30), externalIP, httpOnly, forwarding(proxy.ForwardDSR)),
			service("dsrudp", 31, nodePortType, forwarding(proxy.ForwardDSR),
				ports(svcPort("dns", v1.ProtocolUDP, 53, httpNodePort+1)))},
		Slices: append(slicesOf("dsr", httpSlicePort, dsrWorld),
			slicesOf("dsrudp", []SlicePort{{Name: "dns", Port: 5353, Protocol: v1.ProtocolUDP}}, dsrWorld)...),
		Peers: peers(), Options: dsrOn,
		Flows: both(func(w World) []Flow {
			all := []netip.Addr{w.LocalPod(1), w.RemotePod(1), w.RemotePod(2), w.RemotePod(3)}
			out := tunneled(httpTarget, all, w.RemotePod(1), w.RemotePod(2))
			local := dnat(false, httpTarget, w.LocalPod(1))
			udp := tcp("UDP node port", w.ExternalClient, w.NodeIP, httpNodePort+1, tunneled(5353, all, w.RemotePod(1), w.RemotePod(2)))
			udp.Protocol = proxy.UDP
			return []Flow{
				tcp("LB IP", w.ExternalClient, w.LoadBalancerIP(30), httpPort, out),
				tcp("external IP", w.ExternalClient, w.ExternalIP(30), httpPort, out),
				tcp("node port", w.ExternalClient, w.NodeIP, httpNodePort, out),
				tcp("node port on an address that is not a node IP: masqueraded", w.ExternalClient, w.SecondHostIP, httpNodePort,
					dnat(true, httpTarget, all...)),
				udp,
				tcp("a pod's traffic is not tunnelled", w.LocalPod(9), w.LoadBalancerIP(30), httpPort, dnat(true, httpTarget, all...)),
				fromHost("the node's own traffic is not tunnelled", w, w.LoadBalancerIP(30), httpPort, dnat(true, httpTarget, all...)),
				tcp("cluster IP", w.LocalPod(9), w.ClusterIP(30), httpPort, dnat(false, httpTarget, all...)),
				fromPeer("tunnelled to the LB IP: local endpoints, client kept", w, w.LoadBalancerIP(30), httpPort, local),
				fromPeer("tunnelled to the peer's node port", w, w.OtherNodeIP, httpNodePort, local),
				fromPeer("tunnelled to this node's own node port: not a flow of ours", w, w.NodeIP, httpNodePort, accept),
				fromPeer("tunnelled to the cluster IP: not a flow of ours", w, w.ClusterIP(30), httpPort, accept),
			}
		}),
	}, {
		Name:     "DSR: every endpoint on a peer",
		Services: []*v1.Service{service("dsrpeer", 32, loadBalancer(32), httpOnly, ranges, forwarding(proxy.ForwardDSR))},
		Slices: slicesOf("dsrpeer", httpSlicePort, func(w World) []EP {
			return []EP{{IP: w.RemotePod(1), Node: OtherNodeName}}
		}),
		Peers: peers(), Options: dsrOn,
		Flows: both(func(w World) []Flow {
			return []Flow{
				tcp("LB IP: tunnelled, nothing masqueraded", w.ExternalClient, w.LoadBalancerIP(32), httpPort,
					tunneled(httpTarget, []netip.Addr{w.RemotePod(1)}, w.RemotePod(1))),
				tcp("source ranges still apply", w.OtherClient, w.LoadBalancerIP(32), httpPort, drop),
				fromPeer("tunnelled here without a local endpoint: dropped", w, w.LoadBalancerIP(32), httpPort, drop),
			}
		}),
	}, {
		// The answers to a client inside the cluster would not pass the
		// tc programs of the endpoint's node: a pod or the host beside
		// the endpoint, or an overlay, takes them. Without a detector a
		// pod is still inside: its Node's pod CIDR says so.
		Name:         "DSR: clients inside the cluster are masqueraded, not tunnelled",
		Services:     []*v1.Service{service("dsrinside", 33, nodePortType, httpOnly, forwarding(proxy.ForwardDSR))},
		Slices:       slicesOf("dsrinside", httpSlicePort, dsrWorld),
		Peers:        peers(),
		ClusterNodes: []*v1.Node{MakeNode(NotPeerName, nil)},
		Options:      func(o *desired.Options) { o.DSR, o.ClusterCIDRs = true, nil },
		Flows: both(func(w World) []Flow {
			all := dnat(true, httpTarget, w.LocalPod(1), w.RemotePod(1), w.RemotePod(2), w.RemotePod(3))
			return []Flow{
				tcp("from a peer's pod", w.RemotePod(1), w.NodeIP, httpNodePort, all),
				tcp("from a peer", w.OtherNodeIP, w.NodeIP, httpNodePort, all),
				tcp("from a node that is not a peer", w.ThirdNodeIP, w.NodeIP, httpNodePort, all),
			}
		}),
	}, {
		// An endpoint outside every pod CIDR (a slice written by hand) may
		// be the client itself: it is never tunnelled to (hairpin), but
		// masqueraded.
		Name:     "DSR: the client itself is not tunnelled to",
		Services: []*v1.Service{service("dsrhairpin", 38, nodePortType, httpOnly, forwarding(proxy.ForwardDSR))},
		Slices: slicesOf("dsrhairpin", httpSlicePort, func(w World) []EP {
			return append(dsrWorld(w), EP{IP: w.OtherClient, Node: OtherNodeName})
		}),
		Peers:   peers(),
		Options: dsrOn,
		Flows: both(func(w World) []Flow {
			all := []netip.Addr{w.LocalPod(1), w.RemotePod(1), w.RemotePod(2), w.RemotePod(3), w.OtherClient}
			return []Flow{
				tcp("from the endpoint outside the cluster", w.OtherClient, w.NodeIP, httpNodePort,
					tunneled(httpTarget, all, w.RemotePod(1), w.RemotePod(2))),
			}
		}),
	}}
}

// dsrNotAppliedCases are ports that ask for dsr where it does not apply,
// and a port that asks for snat on a node whose default is dsr: nothing is
// tunnelled, and nothing tunnelled to them is served.
func dsrNotAppliedCases() []Case {
	peers := func() []*v1.Node { return []*v1.Node{MakeNode(OtherNodeName, nil)} }
	return []Case{{
		Name: "DSR: not for externalTrafficPolicy Local, SCTP, or snat",
		Services: []*v1.Service{
			service("dsrlocal", 34, loadBalancer(34), httpOnly, externalLocal, forwarding(proxy.ForwardDSR)),
			service("dsrsctp", 35, nodePortType, forwarding(proxy.ForwardDSR), ports(svcPort("sctp", v1.ProtocolSCTP, 80, httpNodePort+2))),
			service("dsrsnat", 36, loadBalancer(36), httpOnly, forwarding(proxy.ForwardSNAT)),
		},
		Slices: append(append(slicesOf("dsrlocal", httpSlicePort, dsrWorld),
			slicesOf("dsrsctp", []SlicePort{{Name: "sctp", Port: httpTarget, Protocol: v1.ProtocolSCTP}}, dsrWorld)...),
			slicesOf("dsrsnat", httpSlicePort, dsrWorld)...),
		Peers:   peers(),
		Options: func(o *desired.Options) { o.DSR, o.ExternalForwarding = true, proxy.ForwardDSR },
		Flows: both(func(w World) []Flow {
			all := dnat(true, httpTarget, w.LocalPod(1), w.RemotePod(1), w.RemotePod(2), w.RemotePod(3))
			sctp := tcp("SCTP node port: masqueraded", w.ExternalClient, w.NodeIP, httpNodePort+2, all)
			sctp.Protocol = proxy.SCTP
			return []Flow{
				tcp("eTP Local: local endpoints, client kept", w.ExternalClient, w.LoadBalancerIP(34), httpPort,
					dnat(false, httpTarget, w.LocalPod(1))),
				sctp,
				tcp("snat by annotation: masqueraded", w.ExternalClient, w.LoadBalancerIP(36), httpPort, all),
				fromPeer("tunnelled to an eTP Local port: not a flow of ours", w, w.LoadBalancerIP(34), httpPort, accept),
				fromPeer("tunnelled to a snat port: not a flow of ours", w, w.LoadBalancerIP(36), httpPort, accept),
			}
		}),
	}, {
		Name:     "DSR: not on a node without --bpf-dsr",
		Services: []*v1.Service{service("dsroff", 37, loadBalancer(37), httpOnly, forwarding(proxy.ForwardDSR))},
		Slices:   slicesOf("dsroff", httpSlicePort, dsrWorld),
		Peers:    peers(),
		Flows: both(func(w World) []Flow {
			return []Flow{
				tcp("LB IP: masqueraded", w.ExternalClient, w.LoadBalancerIP(37), httpPort,
					dnat(true, httpTarget, w.LocalPod(1), w.RemotePod(1), w.RemotePod(2), w.RemotePod(3))),
				fromPeer("tunnelled here: not a flow of ours", w, w.LoadBalancerIP(37), httpPort, accept),
			}
		}),
	}}
}
