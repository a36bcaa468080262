//go:build ipvsvm

package ipvs_test

import (
	"net/netip"
	"strings"

	v1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"

	"github.com/svcproxy/svcproxy/pkg/pipeline/desired"
	"github.com/svcproxy/svcproxy/pkg/pipeline/model"
	"github.com/svcproxy/svcproxy/pkg/proxy"
	"github.com/svcproxy/svcproxy/pkg/testing/netnstest"
	"github.com/svcproxy/svcproxy/pkg/testing/netnstest/scenario"
	"github.com/svcproxy/svcproxy/pkg/testing/proxytest"
)

// svcSpec is one test Service, dual-stack, one port per protocol (80 → 8080).
type svcSpec struct {
	name      string
	ip        int   // host part of its cluster, external and LB IPs
	nodePort  int32 // TCP node port; UDP +1, SCTP +2; 0: ClusterIP only
	external  bool
	lb        bool
	affinity  int32
	endpoints []string
	edit      func(*v1.Service) // last changes to the Service (hostile fields)
}

var allPods = []string{"pod-a", "pod-b", "pod-c", "pod-r"}

func vmServices() []svcSpec {
	return []svcSpec{
		{name: "spread", ip: 10, nodePort: 30010, external: true, lb: true, endpoints: allPods},
		{name: "sticky", ip: 12, affinity: 10800, endpoints: []string{"pod-a", "pod-b", "pod-c"}},
		{name: "churn", ip: 22, endpoints: []string{"pod-a", "pod-b", "pod-c"}},
		{name: "empty", ip: 23},
	}
}

var protocols = []proxy.Protocol{proxy.TCP, proxy.UDP, proxy.SCTP}

func portName(p proxy.Protocol) string { return strings.ToLower(string(p)) }

func (e *vmEnv) service(s svcSpec) *v1.Service {
	return proxytest.MakeService(testNS, s.name, func(svc *v1.Service) {
		for _, f := range scenario.Families {
			svc.Spec.ClusterIPs = append(svc.Spec.ClusterIPs, f.ClusterIP(s.ip).String())
			svc.Spec.IPFamilies = append(svc.Spec.IPFamilies, v1.IPFamily(f.Family))
			if s.external {
				svc.Spec.ExternalIPs = append(svc.Spec.ExternalIPs, f.ExternalIP(s.ip).String())
			}
			if s.lb {
				svc.Status.LoadBalancer.Ingress = append(svc.Status.LoadBalancer.Ingress, v1.LoadBalancerIngress{IP: f.LBIP(s.ip).String()})
			}
		}
		svc.Spec.ClusterIP = svc.Spec.ClusterIPs[0]
		for i, proto := range protocols {
			port := v1.ServicePort{Name: portName(proto), Protocol: v1.Protocol(proto), Port: svcPort}
			if s.nodePort != 0 {
				port.NodePort = s.nodePort + int32(i)
			}
			svc.Spec.Ports = append(svc.Spec.Ports, port)
		}
		switch {
		case s.lb:
			svc.Spec.Type = v1.ServiceTypeLoadBalancer
		case s.nodePort != 0:
			svc.Spec.Type = v1.ServiceTypeNodePort
		}
		if s.edit != nil {
			defer s.edit(svc)
		}
		if s.affinity > 0 {
			svc.Spec.SessionAffinity = v1.ServiceAffinityClientIP
			svc.Spec.SessionAffinityConfig = &v1.SessionAffinityConfig{ClientIP: &v1.ClientIPConfig{TimeoutSeconds: &s.affinity}}
		}
	})
}

func (e *vmEnv) slice(f scenario.Fam, s svcSpec) *discoveryv1.EndpointSlice {
	var ports []proxytest.SlicePort
	for _, proto := range protocols {
		ports = append(ports, proxytest.SlicePort{Name: portName(proto), Port: podPort, Protocol: v1.Protocol(proto)})
	}
	var eps []proxytest.EP
	for _, name := range s.endpoints {
		pod := e.pods[name]
		eps = append(eps, proxytest.EP{IP: pod.IP(f.V6), Node: pod.Node.NS.Role})
	}
	sl := proxytest.Slice(testNS, s.name, ports, eps...)
	sl.AddressType = discoveryv1.AddressType(f.Family)
	sl.Name = s.name + "-" + string(f.Family)
	return sl
}

// world turns objects into States as the daemon does (Tracker → Compute).
type world struct {
	e       *vmEnv
	f       scenario.Fam
	tracker *model.Tracker
	state   *desired.State
	// scheduling is the IPVS scheduling Compute resolves with (nil: rr).
	scheduling desired.PortSettings
	// clusterNodeIPs are every Node's addresses, as --watch-node-addresses
	// gives them (nil: unwatched).
	clusterNodeIPs []netip.Addr
}

func (w *world) apply(specs ...svcSpec) *desired.State {
	for _, s := range specs {
		w.tracker.OnServiceUpdate(nil, w.e.service(s))
		w.tracker.OnEndpointSliceUpdate(nil, w.e.slice(w.f, s))
	}
	return w.compute()
}

// compute commits what the tracker was given and computes the next State.
func (w *world) compute() *desired.State {
	snap, changes := w.tracker.Commit()
	n := w.e.node1
	node := desired.Node{Name: "node1", IPs: []netip.Addr{n.IPv4, n.IPv6}, PodCIDRs: []netip.Prefix{n.PodsV4, n.PodsV6}}
	node.HostAddrs = append(node.HostAddrs, n.IPv4, n.IPv6)
	node.ClusterNodeIPs = w.clusterNodeIPs
	for _, p := range n.Pods {
		node.HostAddrs = append(node.HostAddrs, p.GatewayV4, p.GatewayV6)
	}
	w.state = desired.Compute(w.state, snap, changes, node, desired.Options{
		Family: w.f.Family, MasqueradeBit: 14, DetectLocalMode: "ClusterCIDR",
		ClusterCIDRs:  []netip.Prefix{netnstest.ClusterCIDRv4, netnstest.ClusterCIDRv6},
		BindNodePorts: true, PortSettings: w.scheduling,
	})
	return w.state
}
