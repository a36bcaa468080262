package iptables

import (
	"fmt"
	"net/netip"
	"slices"

	"github.com/svcproxy/svcproxy/pkg/kiptables"
	"github.com/svcproxy/svcproxy/pkg/pipeline/desired"
	"github.com/svcproxy/svcproxy/pkg/pipeline/metrics"
	"github.com/svcproxy/svcproxy/pkg/pipeline/reconcile"
	"github.com/svcproxy/svcproxy/pkg/proxy"
)

const (
	nfacctInvalidDropped     = metrics.NFAcctCTStateInvalidDropped
	nfacctLocalhostNodePorts = metrics.NFAcctLocalhostNodePortAccepted
)

// config is everything besides a service port that rules depend on. When
// it changes between syncs, every chain may change, so the sync is full.
type config struct {
	family       proxy.IPFamily
	mark         string   // "0x004000", as upstream formats it (%#08x)
	masqAll      bool     // rendered through the routes; here so that a change means a full sync
	ifLocal      []string // match for pod-originated traffic; nil without a detector
	ifNotLocal   []string
	nodePorts    desired.NodePortAddrs
	localhostV4  bool // IPv4 node ports answer on 127.0.0.0/8 (desired.LocalhostDNAT)
	largeCluster bool
	counters     counters // nfacct objects rules may count into
	beLiberal    bool
	rejectPorts  bool
}

func newConfig(st *desired.State, opts *Options, largeCluster bool, acct counters) *config {
	c := &config{
		family:       st.Family,
		mark:         fmt.Sprintf("%#08x", st.Masquerade.Mark),
		masqAll:      st.Masquerade.All,
		nodePorts:    st.NodePorts,
		largeCluster: largeCluster,
		counters:     acct,
		beLiberal:    opts.ConntrackTCPBeLiberal,
		rejectPorts:  opts.RejectUnknownClusterIPPorts,
	}
	c.ifLocal, c.ifNotLocal = localMatches(st.Masquerade.Local)
	// desired decides (IPv4 only, as upstream); the family check keeps the
	// 127.0.0.0/8 rules out of ip6tables whatever a State says.
	c.localhostV4 = st.Family == proxy.IPv4 && st.NodePorts.Localhost == desired.LocalhostDNAT
	return c
}

// localMatches returns the iptables matches of the local-traffic detector.
// iptables takes one -s per rule, so with several pod CIDRs the first is
// used, as upstream's detector (one CIDR per family) does.
func localMatches(d desired.LocalDetector) (ifLocal, ifNotLocal []string) {
	switch d.Mode {
	case desired.LocalCIDR:
		if len(d.CIDRs) > 0 {
			c := d.CIDRs[0].String()
			return w("-s", c), w("!", "-s", c)
		}
	case desired.LocalInterface:
		return w("-i", d.Interface), w("!", "-i", d.Interface)
	case desired.LocalInterfacePrefix:
		return w("-i", d.Interface+"+"), w("!", "-i", d.Interface+"+")
	}
	return nil, nil
}

func (c *config) equal(o *config) bool {
	return o != nil && c.family == o.family && c.mark == o.mark && c.masqAll == o.masqAll &&
		slices.Equal(c.ifLocal, o.ifLocal) && c.nodePorts.Equal(o.nodePorts) && c.localhostV4 == o.localhostV4 &&
		c.largeCluster == o.largeCluster && c.counters == o.counters && c.beLiberal == o.beLiberal &&
		c.rejectPorts == o.rejectPorts
}

// renderer renders rules under one config.
type renderer struct {
	cfg *config
	// state answers RoutesOf: the decisions rules are rendered from.
	state *desired.State
	probs *probabilities
	// chains collects the names of the own chains renderService declares,
	// for the caller to claim as owner, the port rendered last.
	chains []reconcile.Item[string, struct{}]
	owner  owner
}

// filterChains lists the filter chains written (and so flushed) by every sync.
func (c *config) filterChains() []string {
	chains := []string{chainServices, chainExternalServices, chainForward, chainNodePorts, chainProxyFirewall}
	if c.localhostV4 {
		chains = append(chains, chainKubeletFirewall)
	}
	return chains
}

// natChains lists the top-level nat chains written by every sync.
var natChains = []string{chainServices, chainNodePorts, chainPostrouting, chainMarkMasq}

// globalNAT writes the nat rules that belong to no service port.
func (r *renderer) globalNAT(out *lineBuffer) {
	mark := r.cfg.mark
	out.rule(chainPostrouting, w("-m", "mark", "!", "--mark", mark+"/"+mark, "-j", "RETURN"))
	// Clear the mark so a packet that re-traverses the stack is not
	// masqueraded twice.
	out.rule(chainPostrouting, w("-j", "MARK", "--xor-mark", mark))
	out.rule(chainPostrouting, w("-m", "comment", "--comment", quoted("kubernetes service traffic requiring SNAT"),
		"-j", "MASQUERADE", "--random-fully"))
	out.rule(chainMarkMasq, w("-j", "MARK", "--or-mark", mark))
}

// nodePortJumps writes the tail of nat KUBE-SERVICES: the jump to
// KUBE-NODEPORTS for local destinations, or for each accepting address.
func (r *renderer) nodePortJumps(out *lineBuffer) {
	comment := w("-m", "comment", "--comment", quoted("kubernetes service nodeports; NOTE: this must be the last rule in this chain"))
	if r.cfg.nodePorts.All {
		var notLoopback []string
		switch {
		case r.cfg.family == proxy.IPv6:
			notLoopback = w("!", "-d", "::1/128")
		case !r.cfg.localhostV4:
			notLoopback = w("!", "-d", "127.0.0.0/8")
		}
		out.rule(chainServices, comment, w("-m", "addrtype", "--dst-type", "LOCAL"), notLoopback, w("-j", chainNodePorts))
		return
	}
	// desired lists a loopback address only when it decided DNAT.
	for _, ip := range r.cfg.nodePorts.IPs {
		out.rule(chainServices, comment, w("-d", addr(ip), "-j", chainNodePorts))
	}
}

// globalFilter writes the filter rules that belong to no service port.
func (r *renderer) globalFilter(out *lineBuffer) {
	if r.cfg.localhostV4 {
		// CVE-2020-8558: route_localnet would let other hosts reach
		// 127.0.0.0/8 services; kubelet writes the identical rule.
		out.rule(chainKubeletFirewall, w("-m", "comment", "--comment", quoted("block incoming localnet connections"),
			"-d", "127.0.0.0/8", "!", "-s", "127.0.0.0/8", "-m", "conntrack", "!", "--ctstate", "RELATED,ESTABLISHED,DNAT", "-j", "DROP"))
	}
	if !r.cfg.beLiberal {
		var acct []string
		if r.cfg.counters.invalidDropped {
			acct = w("-m", "nfacct", "--nfacct-name", nfacctInvalidDropped)
		}
		out.rule(chainForward, w("-m", "conntrack", "--ctstate", "INVALID"), acct, w("-j", "DROP"))
	}
	mark := r.cfg.mark
	out.rule(chainForward, w("-m", "comment", "--comment", quoted("kubernetes forwarding rules"),
		"-m", "mark", "--mark", mark+"/"+mark, "-j", "ACCEPT"))
	out.rule(chainForward, w("-m", "comment", "--comment", quoted("kubernetes forwarding conntrack rule"),
		"-m", "conntrack", "--ctstate", "RELATED,ESTABLISHED", "-j", "ACCEPT"))
}

// unknownPortRejects rejects traffic to a cluster IP on a port no service
// uses (only with Options.RejectUnknownClusterIPPorts; upstream's iptables
// mode lets it through unrouted). It must follow every per-port rule.
func (r *renderer) unknownPortRejects(out *lineBuffer, clusterIPs []netip.Addr) {
	for _, ip := range clusterIPs {
		out.rule(chainServices, w("-m", "comment", "--comment", quoted("unknown port on cluster IP "+addr(ip)),
			"-d", addr(ip), "-j", "REJECT"))
	}
}

// jump is a rule kube-proxy keeps at the front of a built-in chain.
type jump struct {
	table   kiptables.Table
	from    string
	to      string
	comment string
	extra   []string
}

func (j jump) args() []string {
	args := slices.Clone(j.extra)
	if j.comment != "" {
		args = append(args, "-m", "comment", "--comment", j.comment)
	}
	return append(args, "-j", j.to)
}

var ctNew = []string{"-m", "conntrack", "--ctstate", "NEW"}

// jumps are upstream's, in upstream's order: each is inserted at the front
// if missing, so the resulting order in INPUT/FORWARD/OUTPUT matches a
// node that ran kube-proxy.
var jumps = []jump{
	{kiptables.TableFilter, kiptables.ChainInput, chainExternalServices, "kubernetes externally-visible service portals", ctNew},
	{kiptables.TableFilter, kiptables.ChainForward, chainExternalServices, "kubernetes externally-visible service portals", ctNew},
	{kiptables.TableFilter, kiptables.ChainInput, chainNodePorts, "kubernetes health check service ports", nil},
	{kiptables.TableFilter, kiptables.ChainForward, chainServices, "kubernetes service portals", ctNew},
	{kiptables.TableFilter, kiptables.ChainOutput, chainServices, "kubernetes service portals", ctNew},
	{kiptables.TableFilter, kiptables.ChainForward, chainForward, "kubernetes forwarding rules", nil},
	{kiptables.TableFilter, kiptables.ChainInput, chainProxyFirewall, "kubernetes load balancer firewall", ctNew},
	{kiptables.TableFilter, kiptables.ChainOutput, chainProxyFirewall, "kubernetes load balancer firewall", ctNew},
	{kiptables.TableFilter, kiptables.ChainForward, chainProxyFirewall, "kubernetes load balancer firewall", ctNew},
	{kiptables.TableNAT, kiptables.ChainOutput, chainServices, "kubernetes service portals", nil},
	{kiptables.TableNAT, kiptables.ChainPrerouting, chainServices, "kubernetes service portals", nil},
	{kiptables.TableNAT, kiptables.ChainPostrouting, chainPostrouting, "kubernetes postrouting rules", nil},
}

// kubeletJumps duplicate kubelet's; ensured like jumps but never removed.
var kubeletJumps = []jump{
	{kiptables.TableFilter, kiptables.ChainInput, chainKubeletFirewall, "", nil},
	{kiptables.TableFilter, kiptables.ChainOutput, chainKubeletFirewall, "", nil},
}

var canaryTables = []kiptables.Table{kiptables.TableMangle, kiptables.TableNAT, kiptables.TableFilter}
