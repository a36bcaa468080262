package proxytest

import (
	"net/netip"
	"slices"

	"github.com/svcproxy/svcproxy/pkg/pipeline/desired"
	"github.com/svcproxy/svcproxy/pkg/proxy"
)

// The standard test world. Addresses are fake and used by unit tests only
// (kernel tests build their own namespaces): documentation and ULA ranges,
// laid out like upstream's proxier tests.
//
//	node-a (this node)   192.168.0.2   fd00:1::2    zone-a, second interface 192.168.1.2 / fd00:2::2
//	node-b               192.168.0.3   fd00:1::3    zone-b
//	cluster CIDR         10.0.0.0/16   fd00:10::/64
//	pods on node-a       10.0.1.0/24   fd00:10::1:0/112   (node-a's podCIDR)
//	pods elsewhere       10.0.2.0/24   fd00:10::2:0/112
//	service CIDR         172.30.0.0/16 fd00:172:30::/112
//	external IPs         198.51.100.0/24  2001:db8:100::/64
//	load-balancer IPs    192.0.2.0/24     2001:db8:2::/64
//	external client      203.0.113.5   2001:db8::5   (other clients 100.64.0.5 / 2001:db8:ff::5)
const (
	NodeName      = "node-a"
	OtherNodeName = "node-b"
	NodeZone      = "zone-a"
	OtherZone     = "zone-b"
	// PodBridge and PodInterfacePrefix name pod interfaces for the
	// BridgeInterface and InterfaceNamePrefix local-detection modes.
	PodBridge          = "cbr0"
	PodInterfacePrefix = "veth"
	// PodInterface is a pod's host-side interface for prefix mode.
	PodInterface = "veth1a2b3c"
	// MasqueradeBit is the default masqueradeBit.
	MasqueradeBit = 14
)

// World holds the standard world's addresses of one family.
type World struct {
	Family proxy.IPFamily
	// NodeIP is node-a's primary address; SecondHostIP is on another of its
	// interfaces (not a node IP); Loopback is 127.0.0.1 or ::1.
	NodeIP, SecondHostIP, Loopback netip.Addr
	// OtherNodeIP is node-b's address, ThirdNodeIP node-c's.
	OtherNodeIP, ThirdNodeIP netip.Addr
	// ExternalClient is an off-cluster client; OtherClient is another one,
	// outside every source range the cases allow.
	ExternalClient, OtherClient netip.Addr

	ClusterCIDR, LocalPodCIDR, RemotePodCIDR, ServiceCIDR netip.Prefix

	external, lb netip.Prefix
}

var worlds = map[proxy.IPFamily]World{
	proxy.IPv4: {
		Family: proxy.IPv4,
		NodeIP: mustAddr("192.168.0.2"), SecondHostIP: mustAddr("192.168.1.2"), Loopback: mustAddr("127.0.0.1"),
		OtherNodeIP: mustAddr("192.168.0.3"), ThirdNodeIP: mustAddr("192.168.0.4"),
		ExternalClient: mustAddr("203.0.113.5"), OtherClient: mustAddr("100.64.0.5"),
		ClusterCIDR: mustPrefix("10.0.0.0/16"), LocalPodCIDR: mustPrefix("10.0.1.0/24"),
		RemotePodCIDR: mustPrefix("10.0.2.0/24"), ServiceCIDR: mustPrefix("172.30.0.0/16"),
		external: mustPrefix("198.51.100.0/24"), lb: mustPrefix("192.0.2.0/24"),
	},
	proxy.IPv6: {
		Family: proxy.IPv6,
		NodeIP: mustAddr("fd00:1::2"), SecondHostIP: mustAddr("fd00:2::2"), Loopback: mustAddr("::1"),
		OtherNodeIP: mustAddr("fd00:1::3"), ThirdNodeIP: mustAddr("fd00:1::4"),
		ExternalClient: mustAddr("2001:db8::5"), OtherClient: mustAddr("2001:db8:ff::5"),
		ClusterCIDR: mustPrefix("fd00:10::/64"), LocalPodCIDR: mustPrefix("fd00:10::1:0/112"),
		RemotePodCIDR: mustPrefix("fd00:10::2:0/112"), ServiceCIDR: mustPrefix("fd00:172:30::/112"),
		external: mustPrefix("2001:db8:100::/64"), lb: mustPrefix("2001:db8:2::/64"),
	},
}

// WorldOf returns the standard world of family.
func WorldOf(family proxy.IPFamily) World { return worlds[family] }

// ClusterIP returns the n-th address of the service CIDR (n ≥ 1).
func (w World) ClusterIP(n int) netip.Addr { return nth(w.ServiceCIDR, n) }

// LocalPod returns the n-th pod address on node-a.
func (w World) LocalPod(n int) netip.Addr { return nth(w.LocalPodCIDR, n) }

// RemotePod returns the n-th pod address on another node.
func (w World) RemotePod(n int) netip.Addr { return nth(w.RemotePodCIDR, n) }

// ExternalIP returns the n-th address used for spec.externalIPs.
func (w World) ExternalIP(n int) netip.Addr { return nth(w.external, n) }

// LoadBalancerIP returns the n-th address used for load-balancer ingress.
func (w World) LoadBalancerIP(n int) netip.Addr { return nth(w.lb, n) }

// HostAddrs are the addresses on node-a's interfaces, loopback included.
func (w World) HostAddrs() []netip.Addr {
	return []netip.Addr{w.NodeIP, w.SecondHostIP, w.Loopback}
}

// LocalAddrs returns every address that is local to node-a in state's
// family: its node IPs and its interfaces' addresses, loopback included.
// Tracers use it where the kernel would answer "fib daddr type local".
func LocalAddrs(state *desired.State) []netip.Addr {
	out := append([]netip.Addr(nil), state.NodeIPs...)
	for _, a := range WorldOf(state.Family).HostAddrs() {
		if !contains(out, a) {
			out = append(out, a)
		}
	}
	return out
}

// StandardNode is node-a as Compute sees it.
func StandardNode() desired.Node { return NodeOf(MakeNode(NodeName, nil)) }

// StandardOptions are the defaults of a kube-proxy configuration for family:
// masqueradeBit 14, detectLocalMode ClusterCIDR with both cluster CIDRs,
// nodePortAddresses unset. Node-port addresses are resolved (BindNodePorts,
// as IPVS mode asks) so that every backend can render the same States;
// the others ignore NodePortAddrs.Bound.
func StandardOptions(family proxy.IPFamily) desired.Options {
	return desired.Options{
		Family:        family,
		MasqueradeBit: MasqueradeBit,
		ClusterCIDRs:  []netip.Prefix{worlds[proxy.IPv4].ClusterCIDR, worlds[proxy.IPv6].ClusterCIDR},
		BindNodePorts: true,
	}
}

func nth(p netip.Prefix, n int) netip.Addr {
	a := p.Addr()
	for range n {
		a = a.Next()
	}
	return a
}

func contains(list []netip.Addr, a netip.Addr) bool {
	for _, b := range list {
		if a == b {
			return true
		}
	}
	return false
}

func mustAddr(s string) netip.Addr     { return netip.MustParseAddr(s) }
func mustPrefix(s string) netip.Prefix { return netip.MustParsePrefix(s) }

func sortAddrPorts(aps []netip.AddrPort) {
	slices.SortFunc(aps, netip.AddrPort.Compare)
}
