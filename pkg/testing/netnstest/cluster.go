package netnstest

import (
	"fmt"
	"net/netip"

	"github.com/vishvananda/netlink"
)

// The addressing plan of a Cluster. Everything is inside AllowedPrefixes.
//
//	fabric segment (a bridge in its own namespace): 198.18.0.0/24, fd00:18::/64
//	  node i: 198.18.0.(10+i), fd00:18::(10+i)     clients: .100 upwards
//	pods of node i: 198.19.i.0/24, fd00:19:i::/48; pod k has a /30 (/64)
//	  link: node side 198.19.i.(4k+1), pod 198.19.i.(4k+2)
//	service CIDR 172.30.0.0/16, fd00:30::/108; external IPs 198.18.100.0/24,
//	fd00:18:100::/64; LB IPs 198.18.200.0/24, fd00:18:200::/64.
var (
	ClusterCIDRv4  = netip.MustParsePrefix("198.19.0.0/16")
	ClusterCIDRv6  = netip.MustParsePrefix("fd00:19::/32")
	ServiceCIDRv4  = netip.MustParsePrefix("172.30.0.0/16")
	ServiceCIDRv6  = netip.MustParsePrefix("fd00:30::/108")
	ExternalCIDRv4 = netip.MustParsePrefix("198.18.100.0/24")
	ExternalCIDRv6 = netip.MustParsePrefix("fd00:18:100::/64")
	LBCIDRv4       = netip.MustParsePrefix("198.18.200.0/24")
	LBCIDRv6       = netip.MustParsePrefix("fd00:18:200::/64")
)

// Cluster is a set of node namespaces on a shared L2 fabric, pods behind
// each node on their own veth, and client namespaces on the fabric.
type Cluster struct {
	Lab    *Lab
	Fabric *NS
	Nodes  []*Node

	nextClient int // last octet of the next client address
}

// Node is a node namespace with forwarding on.
type Node struct {
	NS      *NS
	Index   int
	IPv4    netip.Addr
	IPv6    netip.Addr
	PodsV4  netip.Prefix
	PodsV6  netip.Prefix
	Pods    []*Pod
	cluster *Cluster
}

// Pod is a pod namespace on a node.
type Pod struct {
	NS   *NS
	Name string
	IPv4 netip.Addr
	IPv6 netip.Addr
	// Gateway is the node's address on the pod's link (what the pod sees as
	// the source of hairpin-masqueraded traffic).
	GatewayV4, GatewayV6 netip.Addr
	Node                 *Node
}

// IP returns the pod's address of the given family (true = IPv6).
func (p *Pod) IP(v6 bool) netip.Addr {
	if v6 {
		return p.IPv6
	}
	return p.IPv4
}

// IP returns the node's fabric address of the given family.
func (n *Node) IP(v6 bool) netip.Addr {
	if v6 {
		return n.IPv6
	}
	return n.IPv4
}

// NewCluster creates the fabric and nodes (named node1..nodeN) with routes
// to each other's pod ranges. Add pods and clients afterwards.
func NewCluster(lab *Lab, nodes int) (*Cluster, error) {
	fabric, err := lab.NewNS("fabric")
	if err != nil {
		return nil, err
	}
	if err := fabric.nl.LinkAdd(&netlink.Bridge{LinkAttrs: netlink.LinkAttrs{Name: "br0"}}); err != nil {
		return nil, fmt.Errorf("fabric bridge: %w", err)
	}
	if err := fabric.LinkUp("br0"); err != nil {
		return nil, err
	}
	c := &Cluster{Lab: lab, Fabric: fabric, nextClient: 100}
	for i := 1; i <= nodes; i++ {
		if err := c.addNode(i); err != nil {
			return nil, err
		}
	}
	for _, n := range c.Nodes {
		for _, other := range c.Nodes {
			if other == n {
				continue
			}
			if err := n.NS.AddRoute(other.PodsV4, other.IPv4); err != nil {
				return nil, err
			}
			if err := n.NS.AddRoute(other.PodsV6, other.IPv6); err != nil {
				return nil, err
			}
		}
	}
	return c, nil
}

func (c *Cluster) addNode(i int) error {
	ns, err := c.Lab.NewNS(fmt.Sprintf("node%d", i))
	if err != nil {
		return err
	}
	n := &Node{
		NS: ns, Index: i, cluster: c,
		IPv4:   netip.AddrFrom4([4]byte{198, 18, 0, byte(10 + i)}),
		IPv6:   netip.MustParseAddr(fmt.Sprintf("fd00:18::%d", 10+i)),
		PodsV4: netip.PrefixFrom(netip.AddrFrom4([4]byte{198, 19, byte(i), 0}), 24),
		PodsV6: netip.MustParsePrefix(fmt.Sprintf("fd00:19:%d::/48", i)),
	}
	if err := c.attach(ns, n.IPv4, n.IPv6); err != nil {
		return err
	}
	for _, kv := range [][2]string{
		{"net.ipv4.ip_forward", "1"},
		{"net.ipv6.conf.all.forwarding", "1"},
		// Replies of DNATed traffic may come back on another interface.
		{"net.ipv4.conf.all.rp_filter", "0"},
		{"net.ipv4.conf.default.rp_filter", "0"},
	} {
		if err := ns.Sysctl(kv[0], kv[1]); err != nil {
			return err
		}
	}
	if err := routeVIPsToSink(ns); err != nil {
		return err
	}
	c.Nodes = append(c.Nodes, n)
	return nil
}

// routeVIPsToDummy gives a node a route for service, external and LB
// addresses, as a real node's default route would, so that traffic the
// proxy does not DNAT still reaches its filter hooks (REJECT, DROP) instead
// of failing routing with "network unreachable". The route ends in a veth
// pair whose both ends are inside the node (this kernel has no dummy
// driver); no neighbour answers there, so nothing leaves.
func routeVIPsToSink(ns *NS) error {
	if err := Veth(ns, "vips0", ns, "vips1"); err != nil {
		return err
	}
	for _, p := range []netip.Prefix{ServiceCIDRv4, ExternalCIDRv4, LBCIDRv4, ServiceCIDRv6, ExternalCIDRv6, LBCIDRv6} {
		if err := ns.AddDeviceRoute(p, "vips0"); err != nil {
			return err
		}
	}
	return nil
}

// attach plugs ns into the fabric bridge as interface "fab0" with the
// given addresses.
func (c *Cluster) attach(ns *NS, v4, v6 netip.Addr) error {
	bridgeSide := "f-" + ns.Role
	if len(bridgeSide) > 15 {
		return fmt.Errorf("role %q too long for an interface name", ns.Role)
	}
	if err := Veth(ns, "fab0", c.Fabric, bridgeSide); err != nil {
		return err
	}
	br, err := c.Fabric.nl.LinkByName("br0")
	if err != nil {
		return fmt.Errorf("find fabric bridge: %w", err)
	}
	port, err := c.Fabric.nl.LinkByName(bridgeSide)
	if err != nil {
		return fmt.Errorf("find %s: %w", bridgeSide, err)
	}
	if err := c.Fabric.nl.LinkSetMaster(port, br); err != nil {
		return fmt.Errorf("attach %s to fabric: %w", bridgeSide, err)
	}
	if err := ns.AddAddr("fab0", netip.PrefixFrom(v4, 24)); err != nil {
		return err
	}
	return ns.AddAddr("fab0", netip.PrefixFrom(v6, 64))
}

// AddPod creates a pod namespace called name behind node n; its routes
// cover the test ranges only, via the node.
func (n *Node) AddPod(name string) (*Pod, error) {
	k := len(n.Pods)
	if k >= 63 {
		return nil, fmt.Errorf("node %s is full", n.NS.Role)
	}
	ns, err := n.cluster.Lab.NewNS(name)
	if err != nil {
		return nil, err
	}
	i := byte(n.Index)
	p := &Pod{
		NS: ns, Name: name, Node: n,
		GatewayV4: netip.AddrFrom4([4]byte{198, 19, i, byte(4*k + 1)}),
		IPv4:      netip.AddrFrom4([4]byte{198, 19, i, byte(4*k + 2)}),
		GatewayV6: netip.MustParseAddr(fmt.Sprintf("fd00:19:%d:%d::1", i, k)),
		IPv6:      netip.MustParseAddr(fmt.Sprintf("fd00:19:%d:%d::2", i, k)),
	}
	nodeSide := fmt.Sprintf("veth%d", k)
	if err := Veth(n.NS, nodeSide, ns, "eth0"); err != nil {
		return nil, err
	}
	for _, step := range []func() error{
		func() error { return n.NS.AddAddr(nodeSide, netip.PrefixFrom(p.GatewayV4, 30)) },
		func() error { return n.NS.AddAddr(nodeSide, netip.PrefixFrom(p.GatewayV6, 64)) },
		func() error { return ns.AddAddr("eth0", netip.PrefixFrom(p.IPv4, 30)) },
		func() error { return ns.AddAddr("eth0", netip.PrefixFrom(p.IPv6, 64)) },
		func() error { return routeAllVia(ns, p.GatewayV4, p.GatewayV6) },
	} {
		if err := step(); err != nil {
			return nil, err
		}
	}
	n.Pods = append(n.Pods, p)
	return p, nil
}

// AddClient creates a namespace on the fabric that sends to service, node,
// external and LB addresses through entry (as a router or load balancer in
// front of the cluster would). identities (at least 1) is how many fabric
// addresses it gets, for tests that need allowed and blocked clients. It
// returns the addresses, [IPv4, IPv6] per identity.
func (c *Cluster) AddClient(name string, entry *Node, identities int) (*NS, [][2]netip.Addr, error) {
	ns, err := c.Lab.NewNS(name)
	if err != nil {
		return nil, nil, err
	}
	var ids [][2]netip.Addr
	for j := 0; j < identities; j++ {
		base := c.nextClient
		c.nextClient++
		if base > 250 {
			return nil, nil, fmt.Errorf("too many clients")
		}
		v4 := netip.AddrFrom4([4]byte{198, 18, 0, byte(base)})
		v6 := netip.MustParseAddr(fmt.Sprintf("fd00:18::%d", base))
		if j == 0 {
			if err := c.attach(ns, v4, v6); err != nil {
				return nil, nil, err
			}
		} else {
			if err := ns.AddAddr("fab0", netip.PrefixFrom(v4, 24)); err != nil {
				return nil, nil, err
			}
			if err := ns.AddAddr("fab0", netip.PrefixFrom(v6, 64)); err != nil {
				return nil, nil, err
			}
		}
		ids = append(ids, [2]netip.Addr{v4, v6})
	}
	for _, dst := range []netip.Prefix{ServiceCIDRv4, ExternalCIDRv4, LBCIDRv4, ClusterCIDRv4} {
		if err := ns.AddRoute(dst, entry.IPv4); err != nil {
			return nil, nil, err
		}
	}
	for _, dst := range []netip.Prefix{ServiceCIDRv6, ExternalCIDRv6, LBCIDRv6, ClusterCIDRv6} {
		if err := ns.AddRoute(dst, entry.IPv6); err != nil {
			return nil, nil, err
		}
	}
	return ns, ids, nil
}

// routeAllVia routes every test range through the given gateways.
func routeAllVia(ns *NS, gw4, gw6 netip.Addr) error {
	for _, p := range AllowedPrefixes {
		gw := gw4
		if p.Addr().Is6() {
			gw = gw6
		}
		if err := ns.AddRoute(p, gw); err != nil {
			return err
		}
	}
	return nil
}
