package nftables

import (
	"fmt"
	"strings"

	"sigs.k8s.io/knftables"

	"github.com/svcproxy/svcproxy/pkg/pipeline/desired"
)

// config is what every rule derives from the State's global fields.
type config struct {
	fs   famSpec
	mark string // "0x004000"
	// podMatch recognizes a pod's traffic ("" with LocalNone).
	podMatch string
	// markAll and markNotPod mark everything, or everything but a pod's
	// traffic, for masquerade: built once, shared by every port's chains.
	markAll, markNotPod []string
	// routesOf gives each service port's routes (State.RoutesOf).
	routesOf func(*desired.ServicePort) desired.Routes
	// err is the first route the rules could not express (render_routes.go).
	err error
	// dispatch caches the dispatch chains rendered in this sync.
	dispatch map[string]*chainSpec
	// ownSlots: a service port whose external frontends would hold this
	// many endpoint slots beyond one frontend's gets chains of its own
	// (ownsExternal).
	ownSlots int
	// localhost is the State's localhost node-port decision.
	localhost desired.LocalhostNodePorts
	// scratch is what renderService reuses from one port to the next.
	scratch renderScratch
}

// renderScratch is memory renderService reuses from one service port to
// the next within a sync (a cold sync at 10k × 10 renders 10k): the buffer
// keys are built in, and an element list handed back once the part that
// held it was claimed (recycle). No result aliases it: keys are copied out
// of buf, and a part takes the element list for itself.
type renderScratch struct {
	buf   []byte
	elems []elemSpec
}

// takeElems returns an empty element list with room for n.
func (r *renderScratch) takeElems(n int) []elemSpec {
	if cap(r.elems) < n {
		return make([]elemSpec, 0, n)
	}
	elems := r.elems
	r.elems = nil
	return elems
}

// recycle takes back the element list of a part the store has claimed
// (store.claim keeps the list's strings, not the list).
func (r *renderScratch) recycle(elems []elemSpec) {
	if cap(elems) > cap(r.elems) {
		clear(elems)
		r.elems = elems[:0]
	}
}

func newConfig(st *desired.State) *config {
	fs := specFor(st.Family)
	c := &config{fs: fs, mark: fmt.Sprintf("%#08x", st.Masquerade.Mark), ownSlots: defaultOwnSlots, routesOf: st.RoutesOf,
		localhost: st.NodePorts.Localhost}
	notPod := ""
	switch l := st.Masquerade.Local; l.Mode {
	case desired.LocalCIDR:
		if len(l.CIDRs) > 0 {
			cidrs := make([]string, len(l.CIDRs))
			for i, p := range l.CIDRs {
				cidrs[i] = prefixString(p)
			}
			set := "{ " + strings.Join(cidrs, ", ") + " }"
			c.podMatch = fmt.Sprintf("%s saddr %s", fs.ip, set)
			notPod = fmt.Sprintf("%s saddr != %s", fs.ip, set)
		}
	case desired.LocalInterface:
		c.podMatch = fmt.Sprintf("iifname %q", l.Interface)
		notPod = fmt.Sprintf("iifname != %q", l.Interface)
	case desired.LocalInterfacePrefix:
		c.podMatch = fmt.Sprintf("iifname %q", l.Interface+"*")
		notPod = fmt.Sprintf("iifname != %q", l.Interface+"*")
	}
	c.markAll = []string{"jump " + chainMarkMasq}
	if notPod != "" {
		c.markNotPod = []string{notPod + " jump " + chainMarkMasq}
	}
	return c
}

func base(typ knftables.BaseChainType, hook knftables.BaseChainHook, prio knftables.BaseChainPriority) *baseChain {
	return &baseChain{typ: typ, hook: hook, prio: prio}
}

// renderGlobal renders the objects that do not belong to any service port:
// base chains, the fixed chains, sets and maps, and the node-port addresses.
func renderGlobal(st *desired.State, c *config) *part {
	p := &part{}
	ip := c.fs.ip
	const newConn = "ct state new "
	// The firewall check sees the destination before DNAT; the cluster-IP
	// check after it (a destination still in the service ranges was no
	// Service's frontend).
	preDNAT := knftables.DNATPriority + "-10"
	p.addChain(&chainSpec{name: chainFilterPreroutingPreDNAT, base: base(knftables.FilterType, knftables.PreroutingHook, preDNAT),
		rules: []string{newConn + "jump " + chainFirewallCheck}})
	p.addChain(&chainSpec{name: chainFilterOutputPreDNAT, base: base(knftables.FilterType, knftables.OutputHook, preDNAT),
		rules: []string{newConn + "jump " + chainFirewallCheck}})
	p.addChain(&chainSpec{name: chainFilterInput, base: base(knftables.FilterType, knftables.InputHook, knftables.FilterPriority),
		rules: renderLocalhost(p, c)})
	p.addChain(&chainSpec{name: chainFilterForward, base: base(knftables.FilterType, knftables.ForwardHook, knftables.FilterPriority),
		rules: []string{newConn + "jump " + chainClusterIPsCheck}})
	p.addChain(&chainSpec{name: chainFilterOutput, base: base(knftables.FilterType, knftables.OutputHook, knftables.FilterPriority),
		rules: []string{newConn + "jump " + chainClusterIPsCheck}})
	p.addChain(&chainSpec{name: chainNATPrerouting, base: base(knftables.NATType, knftables.PreroutingHook, knftables.DNATPriority),
		rules: []string{"jump " + chainServices}})
	p.addChain(&chainSpec{name: chainNATOutput, base: base(knftables.NATType, knftables.OutputHook, knftables.DNATPriority),
		rules: []string{"jump " + chainServices}})
	p.addChain(&chainSpec{name: chainNATPostrouting, base: base(knftables.NATType, knftables.PostroutingHook, knftables.SNATPriority),
		rules: []string{"jump " + chainMasquerading}})

	nodePorts := fmt.Sprintf("%s daddr @%s", ip, setNodePortIPs)
	if st.NodePorts.All {
		nodePorts = fmt.Sprintf("fib daddr type local %s daddr != %s", ip, c.fs.loopback)
	}
	p.addChain(&chainSpec{name: chainServices, rules: []string{
		fmt.Sprintf("%s daddr . meta l4proto . th dport vmap @%s", ip, mapServiceIPs),
		fmt.Sprintf("%s meta l4proto . th dport vmap @%s", nodePorts, mapServiceNodePorts),
	}})
	p.addChain(&chainSpec{name: chainMarkMasq, rules: []string{"meta mark set meta mark or " + c.mark}})
	// Hairpin: one lookup per shard, and only for a connection's first
	// packet (nat chains see no other).
	var masq []string
	for k := range shards {
		masq = append(masq, fmt.Sprintf("ct status dnat %s saddr . %s daddr @%s jump %s", ip, ip, hairpinSets[k], chainMarkMasq))
	}
	p.addChain(&chainSpec{name: chainMasquerading, rules: append(masq,
		fmt.Sprintf("meta mark & %s == 0 return", c.mark),
		"meta mark set meta mark xor "+c.mark,
		"masquerade fully-random",
	)})
	p.addChain(&chainSpec{name: chainReject, rules: []string{"reject"}})
	p.addChain(&chainSpec{name: chainFirewallCheck, rules: firewallCheck(ip)})
	p.addChain(&chainSpec{name: chainClusterIPsCheck, rules: clusterIPsCheck(st, ip)})

	p.addChain(&chainSpec{name: layoutMarker})
	renderGlobalSets(p, c.fs)
	if !st.NodePorts.All {
		for _, a := range nodePortIPs(st) {
			p.addElem(setNodePortIPs, a, "")
		}
	}
	return p
}

// clusterIPsCheck sees new connections after DNAT, so a destination still
// in the service ranges was not a Service's frontend: an unused port of a
// ClusterIP is rejected, an address no Service holds is dropped (as
// upstream's nftables mode does, with the ServiceCIDR objects' ranges).
func clusterIPsCheck(st *desired.State, ip string) []string {
	rules := []string{fmt.Sprintf("%s daddr @%s reject", ip, setClusterIPs)}
	if len(st.ServiceCIDRs) > 0 {
		cidrs := make([]string, len(st.ServiceCIDRs))
		for i, p := range st.ServiceCIDRs {
			cidrs[i] = prefixString(p)
		}
		rules = append(rules, fmt.Sprintf("%s daddr { %s } drop", ip, strings.Join(cidrs, ", ")))
	}
	return rules
}

func renderGlobalSets(p *part, fs famSpec) {
	a := fs.addrType
	p.addSet(&setSpec{name: mapServiceIPs, isMap: true, typ: a + frontendKeyType + verdictType})
	p.addSet(&setSpec{name: mapServiceNodePorts, isMap: true, typ: portKeyType + verdictType})
	p.addSet(&setSpec{name: setNodePortIPs, typ: a})
	p.addSet(&setSpec{name: setClusterIPs, typ: a})
	p.addSet(&setSpec{name: setFirewallGuards, typ: frontendType(a)})
	for _, proto := range firewallProtocols {
		p.addSet(&setSpec{name: firewallAllowSet(proto), typ: allowType(a), flags: allowFlags})
	}
	for k := range shards {
		p.addSet(&setSpec{name: hairpinSets[k], typ: a + " . " + a})
	}
}

// firewallCheck drops a new connection to a guarded frontend from a source
// its allow set lacks: one rule per protocol, whose allow set is keyed
// without the protocol (firewallAllowSet says why).
func firewallCheck(ip string) []string {
	rules := make([]string, len(firewallProtocols))
	for i, p := range firewallProtocols {
		rules[i] = fmt.Sprintf("meta l4proto %s %s daddr . meta l4proto . th dport @%s %s daddr . th dport . %s saddr != @%s drop",
			strings.ToLower(string(p)), ip, setFirewallGuards, ip, ip, firewallAllowSet(p))
	}
	return rules
}
