package ipvs

import (
	"fmt"
	"strings"

	"github.com/svcproxy/svcproxy/pkg/kiptables"
	"github.com/svcproxy/svcproxy/pkg/pipeline/desired"
	"github.com/svcproxy/svcproxy/pkg/proxy"
)

// jump is a rule in a built-in chain that enters one of ours.
type jump struct {
	table kiptables.Table
	chain string
	rule  []string
}

// jumps are upstream's entry rules, in the order they are ensured.
var jumps = []jump{
	{kiptables.TableNAT, kiptables.ChainOutput, comment("kubernetes service portals", "-j", chainServices)},
	{kiptables.TableNAT, kiptables.ChainPrerouting, comment("kubernetes service portals", "-j", chainServices)},
	{kiptables.TableNAT, kiptables.ChainPostrouting, comment("kubernetes postrouting rules", "-j", chainPostrouting)},
	{kiptables.TableFilter, kiptables.ChainForward, comment("kubernetes forwarding rules", "-j", chainForward)},
	{kiptables.TableFilter, kiptables.ChainInput, comment("kubernetes health check rules", "-j", chainNodePort)},
	{kiptables.TableFilter, kiptables.ChainInput, comment("kube-proxy firewall rules", "-j", chainProxyFirewall)},
	{kiptables.TableFilter, kiptables.ChainForward, comment("kube-proxy firewall rules", "-j", chainProxyFirewall)},
	{kiptables.TableFilter, kiptables.ChainInput, comment("kubernetes ipvs access filter", "-j", chainIPVSFilter)},
	{kiptables.TableFilter, kiptables.ChainOutput, comment("kubernetes ipvs access filter", "-j", chainIPVSOutFilter)},
}

var (
	natChains    = []string{chainServices, chainPostrouting, chainNodePort, chainLoadBalancer, chainMarkMasq}
	filterChains = []string{chainForward, chainNodePort, chainProxyFirewall, chainSourceRangesFirewall, chainIPVSFilter, chainIPVSOutFilter}
)

func comment(text string, rest ...string) []string {
	return append([]string{"-m", "comment", "--comment", text}, rest...)
}

// rules accumulates restore lines.
type rules struct {
	b      strings.Builder
	family proxy.IPFamily
}

// raw writes a line that is not a rule (a table, chain or COMMIT line).
func (r *rules) raw(line string) {
	r.b.WriteString(line)
	r.b.WriteByte('\n')
}

func (r *rules) line(words ...string) {
	r.b.WriteString(kiptables.JoinArgs(words))
	r.b.WriteByte('\n')
}

// set returns the words of an ipset match on one of our sets.
func (r *rules) set(base, dirs string, negate ...bool) []string {
	words := []string{"-m", "set"}
	if len(negate) > 0 && negate[0] {
		words = append(words, "!")
	}
	return append(words, "--match-set", setName(r.family, base), dirs)
}

// renderIptables returns the iptables-restore input for this family's
// chains. It depends only on the masquerade policy, never on services: the
// per-service data lives in ipsets, which is the point of IPVS mode, so
// the rules are rewritten only when the configuration changes.
func renderIptables(family proxy.IPFamily, m desired.Masquerade) []byte {
	r := &rules{family: family}
	mark := fmt.Sprintf("%#08x", m.Mark)
	r.raw("*nat")
	for _, c := range natChains {
		r.raw(":" + c + " - [0:0]")
	}
	r.line(append([]string{"-A", chainMarkMasq}, "-j", "MARK", "--or-mark", mark)...)
	renderPostrouting(r, mark)
	renderServices(r, m)
	r.line(append(append([]string{"-A", chainLoadBalancer}, r.set(setLoadBalancerLocal, "dst,dst")...), "-j", "RETURN")...)
	r.line("-A", chainLoadBalancer, "-j", chainMarkMasq)
	for _, np := range []struct{ proto, local, all, dirs string }{
		{"tcp", setNodePortLocalTCP, setNodePortTCP, "dst"},
		{"udp", setNodePortLocalUDP, setNodePortUDP, "dst"},
		{"sctp", setNodePortLocalSCTP, setNodePortSCTP, "dst,dst"},
	} {
		r.line(append(append([]string{"-A", chainNodePort, "-p", np.proto}, r.set(np.local, np.dirs)...), "-j", "RETURN")...)
		r.line(append(append([]string{"-A", chainNodePort, "-p", np.proto}, r.set(np.all, np.dirs)...), "-j", chainMarkMasq)...)
	}
	r.raw("COMMIT")
	renderFilter(r, mark)
	return []byte(r.b.String())
}

func renderPostrouting(r *rules, mark string) {
	r.line(append(append([]string{"-A", chainPostrouting}, comment("Kubernetes endpoints dst ip:port, source ip for solving hairpin purpose")...),
		append(r.set(setLoopBack, "dst,dst,src"), "-j", "MASQUERADE")...)...)
	r.line("-A", chainPostrouting, "-m", "mark", "!", "--mark", mark+"/"+mark, "-j", "RETURN")
	r.line("-A", chainPostrouting, "-j", "MARK", "--xor-mark", mark)
	r.line(append(append([]string{"-A", chainPostrouting}, comment("kubernetes service traffic requiring SNAT")...),
		"-j", "MASQUERADE", "--random-fully")...)
}

// renderServices writes nat KUBE-SERVICES: masquerade marking per frontend
// kind, node ports, and ACCEPT for service traffic so that later nat rules
// of other components leave it alone.
func renderServices(r *rules, m desired.Masquerade) {
	add := func(words ...string) { r.line(append([]string{"-A", chainServices}, words...)...) }
	add(append(r.set(setLoadBalancer, "dst,dst"), "-j", chainLoadBalancer)...)
	renderClusterIPMasquerade(r, m, add)
	add(append(r.set(setExternalIP, "dst,dst"), "-j", chainMarkMasq)...)
	for _, set := range []string{setExternalIP, setExternalIPLocal} {
		// Traffic from off the machine, and traffic to external IPs that
		// are local anyway, stops here; pod traffic goes on to the
		// node-port check like upstream.
		add(append(r.set(set, "dst,dst"), "-m", "physdev", "!", "--physdev-is-in",
			"-m", "addrtype", "!", "--src-type", "LOCAL", "-j", "ACCEPT")...)
		add(append(r.set(set, "dst,dst"), "-m", "addrtype", "--dst-type", "LOCAL", "-j", "ACCEPT")...)
	}
	add("-m", "addrtype", "--dst-type", "LOCAL", "-j", chainNodePort)
	add(append(r.set(setClusterIP, "dst,dst"), "-j", "ACCEPT")...)
	add(append(r.set(setLoadBalancer, "dst,dst"), "-j", "ACCEPT")...)
}

// renderClusterIPMasquerade marks cluster-IP traffic to be masqueraded:
// all of it (masqueradeAll), what the local detector says is not from a
// pod, or, without a detector, node traffic that picked a cluster IP as
// its source address (the dummy link makes them local).
func renderClusterIPMasquerade(r *rules, m desired.Masquerade, add func(...string)) {
	switch {
	case m.All:
		add(append(r.set(setClusterIP, "dst,dst"), "-j", chainMarkMasq)...)
	case m.Local.Mode == desired.LocalCIDR && len(m.Local.CIDRs) == 1:
		add(append(append([]string{"!", "-s", m.Local.CIDRs[0].String()}, r.set(setClusterIP, "dst,dst")...), "-j", chainMarkMasq)...)
	case m.Local.Mode == desired.LocalCIDR:
		// iptables takes one -s per rule: return early for each pod range.
		for _, cidr := range m.Local.CIDRs {
			add(append(append([]string{"-s", cidr.String()}, r.set(setClusterIP, "dst,dst")...), "-j", "RETURN")...)
		}
		add(append(r.set(setClusterIP, "dst,dst"), "-j", chainMarkMasq)...)
	case m.Local.Mode == desired.LocalInterface:
		add(append(append([]string{"!", "-i", m.Local.Interface}, r.set(setClusterIP, "dst,dst")...), "-j", chainMarkMasq)...)
	case m.Local.Mode == desired.LocalInterfacePrefix:
		add(append(append([]string{"!", "-i", m.Local.Interface + "+"}, r.set(setClusterIP, "dst,dst")...), "-j", chainMarkMasq)...)
	default:
		add(append(r.set(setClusterIP, "src,dst"), "-j", chainMarkMasq)...)
	}
}

func renderFilter(r *rules, mark string) {
	r.raw("*filter")
	for _, c := range filterChains {
		r.raw(":" + c + " - [0:0]")
	}
	r.line(append(append([]string{"-A", chainForward}, comment("kubernetes forwarding rules")...),
		"-m", "mark", "--mark", mark+"/"+mark, "-j", "ACCEPT")...)
	r.line(append(append([]string{"-A", chainForward}, comment("kubernetes forwarding conntrack rule")...),
		"-m", "conntrack", "--ctstate", "RELATED,ESTABLISHED", "-j", "ACCEPT")...)
	r.line(append(append([]string{"-A", chainNodePort}, comment("Kubernetes health check node port")...),
		append(r.set(setHealthCheckNodePort, "dst"), "-j", "ACCEPT")...)...)
	r.line(append(append([]string{"-A", chainProxyFirewall}, r.set(setLoadBalancerFW, "dst,dst")...), "-j", chainSourceRangesFirewall)...)
	r.line(append(append([]string{"-A", chainSourceRangesFirewall}, r.set(setLBSourceCIDR, "dst,dst,src")...), "-j", "RETURN")...)
	r.line(append(append([]string{"-A", chainSourceRangesFirewall}, r.set(setLBSourceIP, "dst,dst,src")...), "-j", "RETURN")...)
	r.line("-A", chainSourceRangesFirewall, "-j", "DROP")
	for _, s := range []struct{ set, dirs string }{
		{setLoadBalancer, "dst,dst"}, {setClusterIP, "dst,dst"}, {setExternalIP, "dst,dst"},
		{setExternalIPLocal, "dst,dst"}, {setHealthCheckNodePort, "dst"},
	} {
		r.line(append(append([]string{"-A", chainIPVSFilter}, r.set(s.set, s.dirs)...), "-j", "RETURN")...)
	}
	// Block everything else addressed to the dummy link's IPs: without it,
	// any port the host listens on would answer on every service IP.
	r.line(append(append([]string{"-A", chainIPVSFilter, "-m", "conntrack", "--ctstate", "NEW"}, r.set(setIPVSIPs, "dst")...), "-j", "REJECT")...)
	r.raw("COMMIT")
}

// renderIptablesCleanup flushes and deletes every chain of ours. The jump
// rules that reference them must be gone first.
func renderIptablesCleanup(present map[kiptables.Table][]string) []byte {
	var b strings.Builder
	for _, t := range []kiptables.Table{kiptables.TableNAT, kiptables.TableFilter} {
		if len(present[t]) == 0 {
			continue
		}
		b.WriteString("*" + string(t) + "\n")
		for _, c := range present[t] {
			b.WriteString(":" + c + " - [0:0]\n")
		}
		for _, c := range present[t] {
			b.WriteString("-X " + c + "\n")
		}
		b.WriteString("COMMIT\n")
	}
	return []byte(b.String())
}
