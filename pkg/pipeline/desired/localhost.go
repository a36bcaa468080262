package desired

import (
	"net/netip"
	"strings"

	"github.com/svcproxy/svcproxy/pkg/proxy"
)

// LocalhostMode is how node ports on loopback addresses are asked to be
// treated, named by what is asked rather than by the mode asking it: each
// backend's row in internal/backends sets it from the configuration;
// Compute turns it, per family and nodePortAddresses, into the State's
// LocalhostNodePorts decision.
type LocalhostMode uint8

// The localhost node-port modes of the configuration.
const (
	// LocalhostModeNone: node ports never answer on loopback (IPVS mode,
	// iptables mode with localhostNodePorts false, nftables mode without
	// the gate).
	LocalhostModeNone LocalhostMode = iota
	// LocalhostModeDNAT: IPv4 node ports are DNATed on 127.0.0.0/8 too
	// when nodePortAddresses covers 127.0.0.1 (iptables mode with
	// localhostNodePorts, its default).
	LocalhostModeDNAT
	// LocalhostModeProxied: a userspace proxy serves TCP node ports on the
	// loopback addresses nodePortAddresses names itself, and the rest is
	// rejected (nftables mode with the gate
	// KubeProxyNFTablesLocalhostNodePorts, KEP-6032).
	LocalhostModeProxied
)

// LocalhostNodePorts is the decision: what happens to a new connection to
// a node port on a loopback address of the State's family.
type LocalhostNodePorts uint8

// The localhost node-port decisions.
const (
	// LocalhostOff: no rule sees such traffic; nothing listens there, so
	// the kernel refuses TCP, uncounted. NodePortAddrs.IPs holds no
	// loopback address.
	LocalhostOff LocalhostNodePorts = iota
	// LocalhostDNAT: node ports on 127.0.0.0/8 are DNATed like any other
	// (iptables, IPv4 only; needs route_localnet). NodePortAddrs.IPs may
	// hold 127.0.0.1.
	LocalhostDNAT
	// LocalhostReject: every protocol's localhost node-port traffic is
	// rejected and counted (the gate is on, but nodePortAddresses does not
	// name loopback, so no userspace proxy runs).
	LocalhostReject
	// LocalhostProxied: the userspace proxy (internal/localnodeport) serves
	// TCP; UDP and SCTP, which it cannot serve, are rejected and counted.
	LocalhostProxied
)

// String names the decision for explanations and the debug state.
func (l LocalhostNodePorts) String() string {
	switch l {
	case LocalhostDNAT:
		return "DNAT"
	case LocalhostReject:
		return "reject"
	case LocalhostProxied:
		return "proxied"
	}
	return "off"
}

// Rejected returns the protocols whose localhost node-port traffic is
// rejected and counted under decision l.
func (l LocalhostNodePorts) Rejected() []proxy.Protocol {
	switch l {
	case LocalhostReject:
		return []proxy.Protocol{proxy.TCP, proxy.UDP, proxy.SCTP}
	case LocalhostProxied:
		return []proxy.Protocol{proxy.UDP, proxy.SCTP}
	}
	return nil
}

// Rejects reports whether localhost node-port traffic of protocol p is
// rejected and counted under decision l.
func (l LocalhostNodePorts) Rejects(p proxy.Protocol) bool {
	switch l {
	case LocalhostReject:
		return true
	case LocalhostProxied:
		return p != proxy.TCP
	}
	return false
}

// DecideLocalhost is the localhost node-port decision of opts' family, as
// upstream's proxiers make it. Compute puts it in State.NodePorts; the app
// asks it too, to know whether to start the userspace proxy before any
// State exists. It depends on opts alone.
func DecideLocalhost(opts Options) LocalhostNodePorts {
	switch opts.Localhost {
	case LocalhostModeDNAT:
		// Upstream's iptables proxier: IPv4 only, and only when
		// nodePortAddresses lets node ports answer on 127.0.0.1.
		if opts.Family == proxy.IPv4 && coversIPv4Loopback(opts.NodePortAddresses) {
			return LocalhostDNAT
		}
	case LocalhostModeProxied:
		if explicitLoopback(opts.NodePortAddresses, opts.Family) {
			return LocalhostProxied
		}
		return LocalhostReject
	}
	return LocalhostOff
}

// coversIPv4Loopback reports whether nodePortAddresses let IPv4 node ports
// answer on 127.0.0.1: no IPv4 entry (every address), "all", "localhost",
// or a CIDR that contains it ("primary" is a node IP, never loopback).
func coversIPv4Loopback(entries []string) bool {
	v4loopback := loopback(proxy.IPv4)
	anyV4 := false
	for _, e := range entries {
		switch e = strings.TrimSpace(e); e {
		case NodePortAddressesAll, NodePortAddressesLocalhost:
			return true
		case NodePortAddressesPrimary:
			anyV4 = true
			continue
		}
		p, err := netip.ParsePrefix(e)
		if err != nil || !p.Addr().Is4() {
			continue
		}
		anyV4 = true
		if p.Contains(v4loopback) {
			return true
		}
	}
	return !anyV4
}

// explicitLoopback reports whether nodePortAddresses holds an entry of
// family that targets loopback itself ("localhost", 127.0.0.0/8, ::1/128),
// as upstream's ContainsExplicitLoopback: a range that merely contains
// loopback (0.0.0.0/0, "all") does not count.
func explicitLoopback(entries []string, family proxy.IPFamily) bool {
	for _, e := range entries {
		e = strings.TrimSpace(e)
		if e == NodePortAddressesLocalhost {
			return true
		}
		p, err := netip.ParsePrefix(e)
		if err != nil || !family.Contains(p.Addr()) {
			continue
		}
		if p.Masked().Addr().IsLoopback() {
			return true
		}
	}
	return false
}
