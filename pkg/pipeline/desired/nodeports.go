package desired

import (
	"net/netip"
	"slices"
	"strings"

	"github.com/svcproxy/svcproxy/pkg/proxy"
)

// The nodePortAddresses keywords.
const (
	NodePortAddressesPrimary   = "primary"
	NodePortAddressesLocalhost = "localhost"
	NodePortAddressesAll       = "all"
)

// nodePortAddrs decides on which destination addresses node ports answer.
// Entries of the other family are ignored; when none of this family remain,
// every address answers, as upstream's NewNodePortAddresses does. Entries
// that are not keywords and do not parse as CIDRs are ignored (config has
// validated them already). Loopback addresses accept node ports only when
// the localhost decision DNATs them.
func nodePortAddrs(opts Options, family proxy.IPFamily, node Node) NodePortAddrs {
	opts.Family = family
	out := nodePortSelection(opts.NodePortAddresses, family, node)
	out.Localhost = DecideLocalhost(opts)
	if out.Localhost != LocalhostDNAT {
		out.IPs = slices.DeleteFunc(out.IPs, netip.Addr.IsLoopback)
	}
	if opts.BindNodePorts {
		out.Bound = boundNodePorts(out, family, node)
	}
	return out
}

// boundNodePorts lists the addresses a backend that binds each one must
// serve node ports on: IPs, or with All every host address of family,
// loopback only when DNATed, never link-local (see NodePortAddrs.Bound),
// sorted.
func boundNodePorts(np NodePortAddrs, family proxy.IPFamily, node Node) []netip.Addr {
	src := np.IPs
	if np.All {
		src = node.HostAddrs
	}
	var out []netip.Addr
	for _, a := range src {
		a = a.Unmap()
		if !family.Contains(a) || a.IsLinkLocalUnicast() || (a.IsLoopback() && np.Localhost != LocalhostDNAT) {
			continue
		}
		out = append(out, a)
	}
	slices.SortFunc(out, netip.Addr.Compare)
	return slices.Compact(out)
}

// nodePortSelection is what the nodePortAddresses entries select among the
// node's addresses, loopback included.
func nodePortSelection(entries []string, family proxy.IPFamily, node Node) NodePortAddrs {
	var ips []netip.Addr
	ofFamily := false
	for _, entry := range entries {
		switch strings.TrimSpace(entry) {
		case NodePortAddressesAll:
			return NodePortAddrs{All: true}
		case NodePortAddressesPrimary:
			// Upstream rewrites "primary" into the node IP of each family
			// as a host CIDR; a family without a node IP gets no CIDR and so
			// falls back to all addresses.
			// Like any CIDR, that host CIDR then selects among the addresses
			// configured on the host: a node IP that is not local serves nothing.
			if ip, ok := firstOfFamily(node.IPs, family); ok && !ip.IsLoopback() {
				ips = append(ips, hostAddrsIn(node.HostAddrs, netip.PrefixFrom(ip, ip.BitLen()), family)...)
				ofFamily = true
			}
		case NodePortAddressesLocalhost:
			ofFamily = true
			ips = append(ips, loopback(family))
		default:
			prefix, err := netip.ParsePrefix(strings.TrimSpace(entry))
			if err != nil || !family.Contains(prefix.Addr()) {
				continue
			}
			if prefix.Bits() == 0 {
				return NodePortAddrs{All: true}
			}
			ofFamily = true
			ips = append(ips, hostAddrsIn(node.HostAddrs, prefix, family)...)
		}
	}
	if !ofFamily {
		return NodePortAddrs{All: true}
	}
	slices.SortFunc(ips, netip.Addr.Compare)
	return NodePortAddrs{IPs: slices.Compact(ips)}
}

func hostAddrsIn(addrs []netip.Addr, prefix netip.Prefix, family proxy.IPFamily) []netip.Addr {
	var out []netip.Addr
	for _, a := range addrs {
		a = a.Unmap()
		if family.Contains(a) && prefix.Contains(a) {
			out = append(out, a)
		}
	}
	return out
}

func loopback(family proxy.IPFamily) netip.Addr {
	if family == proxy.IPv6 {
		return netip.IPv6Loopback()
	}
	return netip.AddrFrom4([4]byte{127, 0, 0, 1})
}

// NodePortAddresses lists the destination addresses node ports answer on,
// for a backend that matches each address itself (the eBPF maps): the
// bound addresses where Compute resolved them, else the node's IPs for
// "all", else the selected ones.
func (s *State) NodePortAddresses() []netip.Addr {
	switch {
	case len(s.NodePorts.Bound) > 0:
		return s.NodePorts.Bound
	case s.NodePorts.All:
		return s.NodeIPs
	}
	return s.NodePorts.IPs
}
