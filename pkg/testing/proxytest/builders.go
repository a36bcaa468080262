package proxytest

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"

	v1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/svcproxy/svcproxy/pkg/pipeline/desired"
	"github.com/svcproxy/svcproxy/pkg/proxy"
)

// MakeService returns a ClusterIP Service ns/name edited by edit, in the
// style of upstream's makeTestService.
func MakeService(ns, name string, edit func(*v1.Service)) *v1.Service {
	svc := &v1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: v1.ServiceSpec{
			Type:            v1.ServiceTypeClusterIP,
			SessionAffinity: v1.ServiceAffinityNone,
		},
	}
	if edit != nil {
		edit(svc)
	}
	return svc
}

// MakeEndpointSlice returns the sliceNum-th EndpointSlice of Service
// ns/svcName, of address type IPv4 unless edit changes it, in the style of
// upstream's makeTestEndpointSlice.
func MakeEndpointSlice(ns, svcName string, sliceNum int, edit func(*discoveryv1.EndpointSlice)) *discoveryv1.EndpointSlice {
	slice := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: ns,
			Name:      fmt.Sprintf("%s-%d", svcName, sliceNum),
			Labels:    map[string]string{discoveryv1.LabelServiceName: svcName},
		},
		AddressType: discoveryv1.AddressTypeIPv4,
	}
	if edit != nil {
		edit(slice)
	}
	return slice
}

// MakeNode returns a Node named name. For NodeName and OtherNodeName it
// carries the standard world's addresses, zone label and podCIDRs, for
// NotPeerName its addresses and zone; edit may change anything.
func MakeNode(name string, edit func(*v1.Node)) *v1.Node {
	node := &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{}}}
	switch name {
	case NodeName:
		setNodeWorld(node, NodeZone, worlds[proxy.IPv4].NodeIP, worlds[proxy.IPv6].NodeIP,
			worlds[proxy.IPv4].LocalPodCIDR, worlds[proxy.IPv6].LocalPodCIDR)
	case OtherNodeName:
		setNodeWorld(node, OtherZone, worlds[proxy.IPv4].OtherNodeIP, worlds[proxy.IPv6].OtherNodeIP,
			worlds[proxy.IPv4].RemotePodCIDR, worlds[proxy.IPv6].RemotePodCIDR)
	case NotPeerName:
		setNodeWorld(node, OtherZone, worlds[proxy.IPv4].ThirdNodeIP, worlds[proxy.IPv6].ThirdNodeIP,
			netip.Prefix{}, netip.Prefix{})
	}
	if edit != nil {
		edit(node)
	}
	return node
}

func setNodeWorld(node *v1.Node, zone string, ip4, ip6 netip.Addr, pods4, pods6 netip.Prefix) {
	node.Labels[v1.LabelTopologyZone] = zone
	node.Status.Addresses = []v1.NodeAddress{
		{Type: v1.NodeInternalIP, Address: ip4.String()},
		{Type: v1.NodeInternalIP, Address: ip6.String()},
		{Type: v1.NodeHostName, Address: node.Name},
	}
	if pods4.IsValid() {
		node.Spec.PodCIDR = pods4.String()
		node.Spec.PodCIDRs = []string{pods4.String(), pods6.String()}
	}
}

// NodeOf converts a Node object the way the daemon does: InternalIPs, then
// ExternalIPs, primary first; the zone label; podCIDRs. Host addresses, which
// the daemon reads from the kernel, are the node IPs plus the standard
// world's second interface and loopback addresses.
func NodeOf(node *v1.Node) desired.Node {
	out := desired.Node{Name: node.Name, Zone: node.Labels[v1.LabelTopologyZone]}
	for _, kind := range []v1.NodeAddressType{v1.NodeInternalIP, v1.NodeExternalIP} {
		for _, a := range node.Status.Addresses {
			if ip, err := netip.ParseAddr(a.Address); err == nil && a.Type == kind && !contains(out.IPs, ip) {
				out.IPs = append(out.IPs, ip)
			}
		}
	}
	for _, c := range node.Spec.PodCIDRs {
		if p, err := netip.ParsePrefix(c); err == nil {
			out.PodCIDRs = append(out.PodCIDRs, p)
		}
	}
	out.HostAddrs = append(out.HostAddrs, out.IPs...)
	for _, f := range proxy.Families {
		w := worlds[f]
		out.HostAddrs = append(out.HostAddrs, w.SecondHostIP, w.Loopback)
	}
	return out
}

// ClusterSourcesOf is what the daemon makes of nodes for
// desired.Node.ClusterSources: each Node's addresses, as NodeOf takes
// them, and its pod CIDRs, sorted and unique.
func ClusterSourcesOf(nodes ...*v1.Node) []netip.Prefix {
	var out []netip.Prefix
	for _, node := range nodes {
		n := NodeOf(node)
		for _, ip := range n.IPs {
			out = append(out, netip.PrefixFrom(ip, ip.BitLen()))
		}
		out = append(out, n.PodCIDRs...)
	}
	slices.SortFunc(out, func(a, b netip.Prefix) int { return a.Compare(b) })
	return slices.Compact(out)
}

// EP describes one endpoint of a slice compactly. The zero conditions mean
// ready, serving, not terminating.
type EP struct {
	IP          netip.Addr
	Node        string
	NotReady    bool
	NotServing  bool
	Terminating bool
	ZoneHints   []string
	NodeHints   []string
}

// AsTerminating returns ep as a terminating endpoint that still serves, the
// state of a pod in its graceful shutdown.
func (ep EP) AsTerminating() EP {
	ep.NotReady, ep.Terminating = true, true
	return ep
}

// SlicePort is one port of an EndpointSlice.
type SlicePort struct {
	Name     string
	Port     int32
	Protocol v1.Protocol
}

// Slice returns an EndpointSlice of ns/svc holding eps, whose family is taken
// from the first endpoint (IPv4 when there is none).
func Slice(ns, svc string, ports []SlicePort, eps ...EP) *discoveryv1.EndpointSlice {
	family := proxy.IPv4
	if len(eps) > 0 {
		family = proxy.FamilyOf(eps[0].IP)
	}
	return MakeEndpointSlice(ns, svc+"-"+strings.ToLower(string(family)), 1, func(s *discoveryv1.EndpointSlice) {
		s.Labels[discoveryv1.LabelServiceName] = svc
		s.AddressType = discoveryv1.AddressType(family)
		for _, p := range ports {
			s.Ports = append(s.Ports, discoveryv1.EndpointPort{
				Name: ptr.To(p.Name), Port: ptr.To(p.Port), Protocol: ptr.To(p.Protocol),
			})
		}
		for _, ep := range eps {
			s.Endpoints = append(s.Endpoints, endpointOf(ep))
		}
	})
}

func endpointOf(ep EP) discoveryv1.Endpoint {
	out := discoveryv1.Endpoint{
		Addresses: []string{ep.IP.String()},
		Conditions: discoveryv1.EndpointConditions{
			Ready:       ptr.To(!ep.NotReady),
			Serving:     ptr.To(!ep.NotServing),
			Terminating: ptr.To(ep.Terminating),
		},
	}
	if ep.Node != "" {
		out.NodeName = ptr.To(ep.Node)
	}
	if ep.ZoneHints != nil || ep.NodeHints != nil {
		out.Hints = &discoveryv1.EndpointHints{}
		for _, z := range ep.ZoneHints {
			out.Hints.ForZones = append(out.Hints.ForZones, discoveryv1.ForZone{Name: z})
		}
		for _, n := range ep.NodeHints {
			out.Hints.ForNodes = append(out.Hints.ForNodes, discoveryv1.ForNode{Name: n})
		}
	}
	return out
}
