package model

import (
	"errors"
	"fmt"
	"net/netip"
	"strings"

	netutils "k8s.io/utils/net"
)

// Problem is one part of an API object that was ignored or overridden while
// parsing it. Reason is a CamelCase word naming the field, fit for an
// Event's reason; Field is the field's path, as in the API.
type Problem struct {
	Reason string
	Field  string
	Err    error
	// Service, when set, names the Service in the object's namespace that
	// the problem is reported on instead of the object: an endpoint address
	// its Service can never use is the Service's problem to its tenant,
	// whoever wrote the slice.
	Service string
}

func (p *Problem) Error() string { return p.Field + ": " + p.Err.Error() }

func (p *Problem) Unwrap() error { return p.Err }

// errNotAnAddress is wrapped by every address that does not parse.
var errNotAnAddress = errors.New("not an IP address")

// parseAddr parses an IP address as upstream kube-proxy does
// (k8s.io/utils/net's sloppy parser): leading zeros are decimal ("010.0.0.1"
// is 10.0.0.1), as Go's parser accepted before 1.17 and the API server once
// stored. A zone ("fe80::1%eth0") is refused: it names nothing on another
// node, and it would reach nft and iptables-restore text verbatim. An
// IPv4-mapped IPv6 address is its IPv4 address, as upstream's family check
// (To4() != nil) sees it.
func parseAddr(s string) (netip.Addr, error) {
	ip := netutils.ParseIPSloppy(s)
	if ip == nil {
		return netip.Addr{}, fmt.Errorf("%q: %w", s, errNotAnAddress)
	}
	addr, ok := netip.AddrFromSlice(ip)
	if !ok {
		return netip.Addr{}, fmt.Errorf("%q: %w", s, errNotAnAddress)
	}
	return addr.Unmap(), nil
}

// parsePrefix parses a CIDR as upstream does (sloppy, no zone) and returns
// it masked. An IPv4-mapped IPv6 prefix of 96 bits or more is the IPv4
// prefix it covers ("::ffff:10.0.0.0/104" is 10.0.0.0/8), which is what
// upstream renders for it; a shorter one is IPv6 (masking drops the
// ::ffff: marker), so no prefix ever lands in a set of the other family.
func parsePrefix(s string) (netip.Prefix, error) {
	_, ipnet, err := netutils.ParseCIDRSloppy(s)
	if err != nil {
		return netip.Prefix{}, fmt.Errorf("%q: %w", s, err)
	}
	ones, _ := ipnet.Mask.Size()
	addr, ok := netip.AddrFromSlice(ipnet.IP)
	if !ok {
		return netip.Prefix{}, fmt.Errorf("%q: %w", s, errNotAnAddress)
	}
	if addr.Is4In6() && ones >= 96 {
		addr, ones = addr.Unmap(), ones-96
	}
	return netip.PrefixFrom(addr, ones).Masked(), nil
}

// refuseEndpointAddr returns why ip can be no Service's endpoint, nil when
// it can be one. The API server refuses some of these in an EndpointSlice
// but not all (a global multicast address, the limited broadcast address);
// upstream programs whatever it accepts. nftables and iptables would DNAT
// to them, which at best goes nowhere and at worst reaches what listens
// on the node's loopback; the kernel refuses a multicast real server in
// IPVS, which cost a quarantine search.
func refuseEndpointAddr(ip netip.Addr) error {
	var what string
	switch {
	case ip.IsUnspecified():
		what = "the unspecified address"
	case ip.IsLoopback():
		what = "a loopback address"
	case ip.IsMulticast():
		what = "a multicast address"
	case ip.IsLinkLocalUnicast():
		what = "a link-local address"
	case ip == limitedBroadcast:
		what = "the limited broadcast address"
	default:
		return nil
	}
	return fmt.Errorf("%s is %s: %w", ip, what, errNoEndpointAddr)
}

var (
	// errNoEndpointAddr is wrapped by every refused endpoint address.
	errNoEndpointAddr = errors.New("no endpoint can have it")
	limitedBroadcast  = netip.AddrFrom4([4]byte{255, 255, 255, 255})
)

// parseIPs parses ips, keeping the valid ones of family in order.
func parseIPs(p *problemList, reason, field string, ips []string, family familyFilter) []netip.Addr {
	var out []netip.Addr
	for i, s := range ips {
		ip, err := parseAddr(s)
		if err != nil {
			p.add(reason, fmt.Sprintf("%s[%d]", field, i), err)
			continue
		}
		if family.Contains(ip) {
			out = append(out, ip)
		}
	}
	return out
}

// parseRanges parses loadBalancerSourceRanges, trimming whitespace as
// upstream does, keeping those of family. invalid reports whether any entry
// did not parse: a caller must then not read an empty result as "no
// restriction".
func parseRanges(p *problemList, ranges []string, family familyFilter) (out []netip.Prefix, invalid bool) {
	for i, s := range ranges {
		prefix, err := parsePrefix(strings.TrimSpace(s))
		if err != nil {
			p.add("InvalidLoadBalancerSourceRange", fmt.Sprintf("spec.loadBalancerSourceRanges[%d]", i), err)
			invalid = true
			continue
		}
		if family.Contains(prefix.Addr()) {
			out = append(out, prefix)
		}
	}
	return out, invalid
}

// familyFilter is what the parsers need of a proxy.IPFamily.
type familyFilter interface{ Contains(netip.Addr) bool }

// problemList collects what was dropped while parsing one object.
type problemList struct{ errs []error }

func (p *problemList) add(reason, field string, err error) {
	p.errs = append(p.errs, &Problem{Reason: reason, Field: field, Err: err})
}

// addFor adds a problem reported on Service service (Problem.Service).
func (p *problemList) addFor(service, reason, field string, err error) {
	p.errs = append(p.errs, &Problem{Reason: reason, Field: field, Err: err, Service: service})
}
