package app

import (
	"net"
	"net/netip"
	"slices"
	"sync"

	v1 "k8s.io/api/core/v1"

	"github.com/svcproxy/svcproxy/pkg/proxy/desired"
)

// zoneLabel is the Node label that topology-aware routing reads.
const zoneLabel = "topology.kubernetes.io/zone"

// nodeView is the latest state of this node, as the syncers need it. The
// node watcher writes it; every family's syncer reads it before a sync.
type nodeView struct {
	mu        sync.Mutex
	node      desired.Node
	known     bool
	bindAddr  netip.Addr
	hostAddrs func() []netip.Addr
}

func newNodeView(name string, bindAddr netip.Addr) *nodeView {
	return &nodeView{node: desired.Node{Name: name}, bindAddr: bindAddr, hostAddrs: interfaceAddrs}
}

// set records node; nil means the Node does not exist (any more).
func (v *nodeView) set(node *v1.Node) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if node == nil {
		v.known = false
		return
	}
	v.node.IPs = nodeIPs(node, v.bindAddr)
	v.node.Zone = node.Labels[zoneLabel]
	v.node.PodCIDRs = parsePrefixes(node.Spec.PodCIDRs)
	v.known = true
}

// get returns the node for Compute, with the host's current interface
// addresses, or false while the Node is unknown.
func (v *nodeView) get() (desired.Node, bool) {
	v.mu.Lock()
	n, ok := v.node, v.known
	v.mu.Unlock()
	if !ok {
		return desired.Node{}, false
	}
	n.HostAddrs = v.hostAddrs()
	return n, true
}

// nodeIPs returns the Node's InternalIPs then ExternalIPs, deduplicated; a
// specified bindAddress comes first, as it picks the primary IP upstream.
func nodeIPs(node *v1.Node, bindAddr netip.Addr) []netip.Addr {
	var ips []netip.Addr
	if bindAddr.IsValid() && !bindAddr.IsUnspecified() {
		ips = append(ips, bindAddr)
	}
	for _, t := range []v1.NodeAddressType{v1.NodeInternalIP, v1.NodeExternalIP} {
		for _, a := range node.Status.Addresses {
			if a.Type != t {
				continue
			}
			ip, err := netip.ParseAddr(a.Address)
			if err == nil && !slices.Contains(ips, ip.Unmap()) {
				ips = append(ips, ip.Unmap())
			}
		}
	}
	return ips
}

func parsePrefixes(cidrs []string) []netip.Prefix {
	var out []netip.Prefix
	for _, c := range cidrs {
		if p, err := netip.ParsePrefix(c); err == nil {
			out = append(out, p.Masked())
		}
	}
	return out
}

// interfaceAddrs lists the addresses configured on this network namespace's
// interfaces; nodePortAddresses CIDRs select among them.
func interfaceAddrs() []netip.Addr {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return nil
	}
	out := make([]netip.Addr, 0, len(addrs))
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok {
			if ip, ok := netip.AddrFromSlice(n.IP); ok {
				out = append(out, ip.Unmap())
			}
		}
	}
	slices.SortFunc(out, netip.Addr.Compare)
	return out
}
