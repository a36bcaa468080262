package nftables

import (
	"fmt"
	"slices"
	"strings"

	"github.com/svcproxy/svcproxy/pkg/proxy"
	"github.com/svcproxy/svcproxy/pkg/proxy/desired"
)

// Options configure a Proxier beyond what the State says.
type Options struct {
	// LocalhostNodePorts is what the table does with new connections to a
	// node port on loopback (KEP-6032).
	LocalhostNodePorts LocalhostNodePorts
}

// LocalhostNodePorts says which localhost node-port traffic the table
// rejects and counts. Node ports never answer on loopback through the
// table itself: a loopback destination is never DNATed, as upstream's
// nftables mode (a DNATed packet keeps its 127.0.0.1 source, which the
// kernel refuses to route off the node).
type LocalhostNodePorts uint8

// The localhost node-port modes, as upstream derives them from the gate
// KubeProxyNFTablesLocalhostNodePorts and nodePortAddresses.
const (
	// LocalhostNodePortsOff: the gate is off; no rule sees such traffic
	// (nothing listens there, so TCP is refused by the kernel, uncounted).
	LocalhostNodePortsOff LocalhostNodePorts = iota
	// LocalhostNodePortsReject: the gate is on but nodePortAddresses does
	// not name loopback, so no userspace proxy runs: every protocol's
	// localhost node-port traffic is rejected and counted.
	LocalhostNodePortsReject
	// LocalhostNodePortsProxied: the userspace proxy serves TCP
	// (internal/localnodeport); UDP and SCTP, which it cannot serve, are
	// rejected and counted.
	LocalhostNodePortsProxied
)

// rejected returns the protocols whose localhost node-port traffic is
// rejected in mode m.
func (m LocalhostNodePorts) rejected() []proxy.Protocol {
	switch m {
	case LocalhostNodePortsReject:
		return []proxy.Protocol{proxy.TCP, proxy.UDP, proxy.SCTP}
	case LocalhostNodePortsProxied:
		return []proxy.Protocol{proxy.UDP, proxy.SCTP}
	default:
		return nil
	}
}

// rejects reports whether localhost node-port traffic of protocol p is
// rejected in mode m.
func (m LocalhostNodePorts) rejects(p proxy.Protocol) bool {
	return slices.Contains(m.rejected(), p)
}

// Upstream's names: dashboards and runbooks look for the counters by name
// (kubeproxy_nftables_localhost_nodeport_rejected_packets_total reads them).
const (
	mapLocalhostReject     = "localhost-nodeport-reject-ports"
	localhostRejectChain   = "localhost-nodeport-reject-"
	localhostRejectCount   = "localhost-nodeport-rejected-"
	localhostRejectMapType = "inet_proto . inet_service : verdict"
)

// LocalhostRejectChain names the chain that counts and rejects localhost
// node-port traffic of protocol p.
func LocalhostRejectChain(p proxy.Protocol) string { return localhostRejectChain + protoName(p) }

// LocalhostRejectCounter names the named counter of protocol p's reject
// chain.
func LocalhostRejectCounter(p proxy.Protocol) string { return localhostRejectCount + protoName(p) }

// chainCounter returns the named counter a chain's rule uses, "" for
// none. The counter lives and dies with its chain (diffChain): it is
// derived from the name so that a chain read back from the kernel, whose
// spec this process never rendered, still takes its counter with it.
func chainCounter(chain string) string {
	if proto, ok := strings.CutPrefix(chain, localhostRejectChain); ok && proto != "ports" {
		return localhostRejectCount + proto
	}
	return ""
}

// renderLocalhost adds the localhost node-port reject map, its chains and
// the filter-input rule that reads the map. filter-input sees the traffic
// because a loopback destination is never DNATed (see LocalhostNodePorts).
func renderLocalhost(p *part, c *config) []string {
	protos := c.localhost.rejected()
	if len(protos) == 0 {
		return nil
	}
	p.addSet(&setSpec{name: mapLocalhostReject, isMap: true, typ: localhostRejectMapType})
	for _, proto := range protos {
		p.addChain(&chainSpec{name: LocalhostRejectChain(proto), rules: []string{
			fmt.Sprintf("counter name %q reject", LocalhostRejectCounter(proto)),
		}})
	}
	return []string{fmt.Sprintf("ct state new %s daddr %s meta l4proto . th dport vmap @%s",
		c.fs.ip, c.fs.loopback, mapLocalhostReject)}
}

// renderLocalhostElem adds sp's node port to the reject map when its
// protocol's localhost traffic is rejected.
func (s *svcContext) renderLocalhostElem() {
	sp := s.sp
	if sp.NodePort == 0 || !s.c.localhost.rejects(sp.Protocol) {
		return
	}
	s.p.addElem(mapLocalhostReject, s.npKey(sp.NodePort), "goto "+LocalhostRejectChain(sp.Protocol))
}

// nodePortIPs are the node-port addresses that go into nodeport-ips:
// never loopback, as upstream, so that localhost node-port traffic is
// left to the userspace proxy or the reject rules (or, gate off, to the
// kernel, which refuses it).
func nodePortIPs(st *desired.State) []string {
	var out []string
	for _, a := range st.NodePorts.IPs {
		if st.Family.Contains(a) && !a.IsLoopback() {
			out = append(out, addrString(a))
		}
	}
	return out
}
