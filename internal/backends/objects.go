package backends

import (
	"context"
	"fmt"
	"net/netip"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"sigs.k8s.io/knftables"

	"github.com/svcproxy/svcproxy/internal/explain"
	"github.com/svcproxy/svcproxy/pkg/knft"
	"github.com/svcproxy/svcproxy/pkg/pipeline/backends/ebpf"
	"github.com/svcproxy/svcproxy/pkg/pipeline/backends/ebpf/nodeport"
	"github.com/svcproxy/svcproxy/pkg/pipeline/backends/iptables"
	"github.com/svcproxy/svcproxy/pkg/pipeline/backends/ipvs"
	"github.com/svcproxy/svcproxy/pkg/pipeline/backends/nftables"
	"github.com/svcproxy/svcproxy/pkg/pipeline/desired"
	"github.com/svcproxy/svcproxy/pkg/pipeline/model"
	"github.com/svcproxy/svcproxy/pkg/proxy"
)

// The rows' Objects (ObjectsFunc): each names the kernel objects
// that implement an explanation as its backend names them, so they live
// beside the rows, the one place outside a backend's package that knows it.

// nftablesObjects asks the nftables backend itself: it renders the one service
// port into a knftables fake, then follows the frontend's verdict through
// the chains it jumps to, collecting the sets and maps they use. Names
// therefore never drift from the backend's.
func nftablesObjects(ctx context.Context, state *desired.State, e explain.Explanation) ([]string, error) {
	if e.Port == nil {
		return nil, nil
	}
	family := knftables.IPv4Family
	if state.Family == proxy.IPv6 {
		family = knftables.IPv6Family
	}
	fake := knftables.NewFake(family, nftables.TableName)
	one := *state
	one.Services = model.NewPortMap(map[proxy.ServicePortName]*desired.ServicePort{e.Port.Name: e.Port})
	one.Changed = nil
	if err := nftables.NewWithInterface(state.Family, knft.NewFake(fake, nil)).Sync(ctx, &one, proxy.FullSync); err != nil {
		return nil, fmt.Errorf("rendering %s for nftables: %w", e.Port.Name, err)
	}
	proto := strings.ToLower(string(e.Port.Protocol))
	mapName, key := "service-ips", []string{e.Packet.Dest.Unmap().String(), proto, strconv.Itoa(int(e.Packet.Port))}
	if e.Frontend == explain.FrontendNodePort {
		mapName, key = "service-nodeports", []string{proto, strconv.Itoa(int(e.Packet.Port))}
	}
	table := fmt.Sprintf("table %s %s", family, nftables.TableName)
	out := []string{table + ": chains nat-prerouting / nat-output → services"}
	if e.Frontend == explain.FrontendNodePort && !state.NodePorts.All {
		out = append(out, table+": set nodeport-ips (the nodePortAddresses)")
	}
	elem := findElement(fake, mapName, key)
	if elem == nil {
		return out, fmt.Errorf("the rendered table has no element %s in map %s", strings.Join(key, " . "), mapName)
	}
	out = append(out, fmt.Sprintf("%s: map %s element { %s : %s }", table, mapName,
		strings.Join(elem.Key, " . "), strings.Join(elem.Value, " . ")))
	chains, refs := follow(fake, strings.Join(elem.Value, " "))
	for _, c := range chains {
		out = append(out, table+": chain "+c)
	}
	for _, r := range refs {
		out = append(out, table+": set/map "+r)
	}
	if e.Frontend == explain.FrontendLoadBalancer && e.Port.AllowedSources != nil {
		out = append(out, table+": set firewall-guards, set firewall-allow-"+proto+" (loadBalancerSourceRanges, chain firewall-check)")
	}
	if e.Masquerade {
		out = append(out, table+": chains mark-for-masquerade, nat-postrouting → masquerading (sets hairpin-endpoints-s0…s7)")
	}
	return out, nil
}

func findElement(fake *knftables.Fake, mapName string, key []string) *knftables.Element {
	fake.RLock()
	defer fake.RUnlock()
	if fake.Table == nil || fake.Table.Maps[mapName] == nil {
		return nil
	}
	return fake.Table.Maps[mapName].FindElement(key...)
}

var (
	jumpRE = regexp.MustCompile(`\b(?:goto|jump) ([A-Za-z0-9_./:-]+)`)
	refRE  = regexp.MustCompile(`@([A-Za-z0-9_./:-]+)`)
)

// follow walks the chains a verdict leads to, breadth first, and returns
// them with the sets and maps their rules reference.
func follow(fake *knftables.Fake, verdict string) (chains, refs []string) {
	fake.RLock()
	defer fake.RUnlock()
	queue := jumps(verdict)
	seen := map[string]bool{}
	for len(queue) > 0 {
		c := queue[0]
		queue = queue[1:]
		ch := fake.Table.Chains[c]
		if seen[c] || ch == nil {
			continue
		}
		seen[c] = true
		chains = append(chains, c)
		for _, r := range ch.Rules {
			queue = append(queue, jumps(r.Rule)...)
			for _, m := range refRE.FindAllStringSubmatch(r.Rule, -1) {
				if !slices.Contains(refs, m[1]) {
					refs = append(refs, m[1])
				}
			}
		}
	}
	return chains, refs
}

func jumps(s string) []string {
	var out []string
	for _, m := range jumpRE.FindAllStringSubmatch(s, -1) {
		out = append(out, m[1])
	}
	return out
}

// iptablesObjects names upstream's chains, as the iptables backend spells
// them (iptables.ChainNamesOf): KUBE-SVL is a Local policy's dispatch,
// KUBE-SVC the cluster-wide one.
func iptablesObjects(_ context.Context, _ *desired.State, e explain.Explanation) ([]string, error) {
	if e.Port == nil {
		return nil, nil
	}
	c := iptables.ChainNamesOf(e.Port.Name)
	out := []string{"nat KUBE-SERVICES (cluster, external and LB IPs; node ports via KUBE-NODEPORTS)"}
	switch {
	case e.Class == explain.ClassInternal && e.Port.InternalLocal:
		out = append(out, "nat "+c.SVL+" (local endpoints)")
	case e.Class == explain.ClassInternal:
		out = append(out, "nat "+c.SVC)
	default:
		if e.Frontend == explain.FrontendLoadBalancer && e.Port.AllowedSources != nil {
			out = append(out, "nat "+c.FW+" (loadBalancerSourceRanges), filter KUBE-PROXY-FIREWALL")
		}
		out = append(out, "nat "+c.EXT)
		if e.Class == explain.ClassExternal && e.Port.ExternalLocal {
			out = append(out, "nat "+c.SVL+" (local endpoints)")
		} else {
			out = append(out, "nat "+c.SVC)
		}
	}
	for _, ep := range e.Endpoints {
		out = append(out, fmt.Sprintf("nat %s (%s)", c.SEP(ep), ep))
	}
	if e.Masquerade {
		out = append(out, "nat KUBE-MARK-MASQ, KUBE-POSTROUTING")
	}
	if e.Verdict == explain.Reject || e.Verdict == explain.Drop {
		out = append(out, "filter KUBE-SERVICES / KUBE-EXTERNAL-SERVICES (REJECT/DROP rules for services without endpoints)")
	}
	return out, nil
}

// ipvsObjects names the virtual server and asks the IPVS backend which of
// its ipsets hold the frontend (IPv6 sets are KUBE-6-…, SCTP node ports
// …-SCTP-HASH: names only the backend should spell).
func ipvsObjects(_ context.Context, state *desired.State, e explain.Explanation) ([]string, error) {
	if e.Port == nil {
		return nil, nil
	}
	vs := fmt.Sprintf("IPVS virtual server %s %s", strings.ToLower(string(e.Port.Protocol)),
		netip.AddrPortFrom(e.Packet.Dest, e.Packet.Port))
	out := []string{vs + " (ipvsadm -Ln)"}
	if sch := e.Port.Setting; sch != nil && sch.Refused != "" {
		out[0] = fmt.Sprintf("%s, scheduler %s (the annotation's %q names no IPVS scheduler)", vs, sch.Value, sch.Refused)
	} else if sch != nil {
		out[0] = fmt.Sprintf("%s, scheduler %s (ipvsadm -Ln)", vs, sch.Value)
	}
	if e.Frontend != explain.FrontendNodePort {
		out = append(out, "address on dummy interface "+ipvs.DummyLink)
	}
	if sets := ipvs.SetsFor(state, e.Port, e.Packet.Dest, e.Packet.Port); len(sets) > 0 {
		out = append(out, "ipsets "+strings.Join(sets, ", "))
	}
	if e.Masquerade {
		out = append(out, "iptables nat KUBE-MARK-MASQ, KUBE-POSTROUTING")
	}
	return out, nil
}

// ebpfObjects names both halves of ebpf mode: the map entries the socket
// hooks translate the frontend with, when a socket on the node connects
// (ebpf.ObjectNames), and what serves packets the hooks never see (from
// other nodes, or from processes outside the cgroup): the nftables
// objects, or, in a family the tc programs serve and the node has no
// nftables table for, the tc programs' (tcObjects).
func ebpfObjects(ctx context.Context, state *desired.State, e explain.Explanation) ([]string, error) {
	if e.Port == nil {
		return nil, nil
	}
	one := *state
	one.Services = model.NewPortMap(map[proxy.ServicePortName]*desired.ServicePort{e.Port.Name: e.Port})
	one.Changed = nil
	dst := netip.AddrPortFrom(e.Packet.Dest.Unmap(), e.Packet.Port)
	out, err := ebpf.ObjectNames(&one, dst, e.Port.Protocol)
	if err != nil {
		// LB IPs with source ranges, and node ports on addresses outside
		// the rendered ones, are the packet path's alone.
		out = []string{"socket hooks: not translated at connect (" + err.Error() + ")"}
	}
	if tcServes(state.Family) && nftables.WithoutRules(state.Family) {
		return append(out, tcObjects(state, e)...), nil
	}
	nft, err := nftablesObjects(ctx, state, e)
	return append(out, nft...), err
}

// tcObjects names what serves e's packets from outside the node when the
// tc programs serve the family without nftables rules: the programs'
// frontend entry and endpoint slots, or, for a frontend they do not
// translate, that nothing on the node does. IPv6 has maps of its own,
// named with a 6, and programs of its own, reached from IPv4's by a tail
// call.
func tcObjects(state *desired.State, e explain.Explanation) []string {
	if e.Frontend == explain.FrontendClusterIP || !nodeport.Served(state.Family, e.Port) {
		return []string{fmt.Sprintf("tc programs: %s %s from outside the node not translated (no nftables rules in ebpf mode with --bpf-tc-interfaces)", e.Port.Protocol, e.Frontend)}
	}
	dst := netip.AddrPortFrom(e.Packet.Dest.Unmap(), e.Packet.Port)
	programs, six := "np_ingress / np_egress", ""
	if state.Family == proxy.IPv6 {
		programs, six = "np_ingress6 / np_egress6 (tail calls from np_ingress / np_egress)", "6"
	}
	return []string{
		fmt.Sprintf("tc programs %s: map np_services%s entry %s/%s", programs, six, dst, strings.ToLower(string(e.Port.Protocol))),
		fmt.Sprintf("tc programs: map np_backends%[1]s slots of its group (np_maglev%[1]s with Maglev, np_affinity%[1]s with ClientIP affinity, np_ranges%[1]s with source ranges)", six),
	}
}
