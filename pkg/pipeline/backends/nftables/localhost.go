package nftables

import (
	"errors"
	"fmt"
	"strings"

	"github.com/svcproxy/svcproxy/pkg/pipeline/desired"
	"github.com/svcproxy/svcproxy/pkg/proxy"
)

// Options configure a Proxier beyond what the State says. Nothing does
// today: the localhost node-port decision, once an option, comes with the
// State (desired.NodePortAddrs.Localhost).
type Options struct{}

// Upstream's names: dashboards and runbooks look for the counters by name
// (kubeproxy_nftables_localhost_nodeport_rejected_packets_total reads them).
const (
	mapLocalhostReject     = "localhost-nodeport-reject-ports"
	localhostRejectChain   = "localhost-nodeport-reject-"
	localhostRejectCount   = "localhost-nodeport-rejected-"
	localhostRejectMapType = portKeyType + verdictType
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
// because a loopback destination is never DNATed: a DNATed packet keeps its
// loopback source, which the kernel refuses to route off the node, so a
// State that decides DNAT fails the sync.
func renderLocalhost(p *part, c *config) []string {
	if c.localhost == desired.LocalhostDNAT && c.err == nil {
		c.err = errors.New("node ports on loopback cannot be DNATed by nftables (localhost decision DNAT)")
	}
	protos := c.localhost.Rejected()
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
	if sp.NodePort == 0 || !s.c.localhost.Rejects(sp.Protocol) {
		return
	}
	s.p.addElem(mapLocalhostReject, s.portData(sp.NodePort), "goto "+LocalhostRejectChain(sp.Protocol))
}

// nodePortIPs are the node-port addresses that go into nodeport-ips, as
// its keys' data.
// desired leaves loopback out unless it decided DNAT, which renderLocalhost
// refuses, so localhost node-port traffic is left to the userspace proxy or
// the reject rules (or, with neither, to the kernel, which refuses it).
func nodePortIPs(st *desired.State) []string {
	out := make([]string, 0, len(st.NodePorts.IPs))
	for _, a := range st.NodePorts.IPs {
		out = append(out, string(appendAddrData(nil, a)))
	}
	return out
}
