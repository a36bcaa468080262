package ipvs

import (
	"net/netip"
	"slices"
	"strings"

	"github.com/svcproxy/svcproxy/pkg/pipeline/desired"
	"github.com/svcproxy/svcproxy/pkg/testing/proxytest"
)

// translate turns the reference outcome of a flow into what IPVS mode does
// instead. Each rule is one documented difference (README.md, "Where IPVS
// mode differs"); everything else must match the reference exactly.
func translate(st *desired.State, flow proxytest.Flow, want proxytest.Result) proxytest.Result {
	// (1. No node ports on loopback addresses: desired decides that now,
	// State.NodePorts.Localhost, and the reference agrees.)
	sp, lbIP := externalFrontend(st, flow)
	if sp != nil {
		src := sourceClass(st, flow)
		switch {
		// 2. Host traffic to a firewalled LB IP is not filtered: IPVS
		//    rewrites it in LOCAL_OUT, before any filter chain sees it.
		case lbIP && flow.FromHost && want.Verdict == proxytest.Drop:
			want = externalPath(sp, src, flow)
		// 3. eTP=Local has one set of real servers per virtual server: pods
		//    and the host get the local endpoints too, unmasqueraded.
		case sp.ExternalLocal && src != "external":
			want = hairpin(dispatch(sp.External, false), flow)
		}
	}
	// 4. A virtual server without real servers answers ICMP port
	//    unreachable: IPVS has no DROP for empty Local policies. (The
	//    source-range DROP is a filter rule and stays.)
	if want.Verdict == proxytest.Drop && !(sp != nil && lbIP && !allowed(sp, flow.Source)) {
		return proxytest.Result{Verdict: proxytest.Reject}
	}
	// 5. Every address on kube-ipvs0 rejects ports no service uses
	//    (KUBE-IPVS-FILTER), external and LB IPs included.
	if want.Verdict == proxytest.Accept && onDummy(st, flow.Dest) {
		return proxytest.Result{Verdict: proxytest.Reject}
	}
	return want
}

// externalFrontend finds the service port whose external IP, LB IP or node
// port the flow addresses (the reference's order), and whether it is an LB IP.
func externalFrontend(st *desired.State, flow proxytest.Flow) (*desired.ServicePort, bool) {
	for _, sp := range st.Services.All() {
		if sp.ClusterIP == flow.Dest {
			return nil, false
		}
	}
	for _, sp := range st.Services.All() {
		if sp.Protocol != flow.Protocol || sp.Port != flow.DestPort {
			continue
		}
		if slices.Contains(sp.ExternalIPs, flow.Dest) {
			return sp, false
		}
		if slices.Contains(sp.LoadBalancerIPs, flow.Dest) {
			return sp, true
		}
	}
	for _, sp := range st.Services.All() {
		if sp.NodePort == flow.DestPort && sp.Protocol == flow.Protocol && slices.Contains(proxytest.LocalAddrs(st), flow.Dest) {
			return sp, false
		}
	}
	return nil, false
}

func externalPath(sp *desired.ServicePort, src string, flow proxytest.Flow) proxytest.Result {
	if sp.ExternalLocal && src != "external" {
		return hairpin(dispatch(sp.External, false), flow)
	}
	return hairpin(dispatch(sp.External, !sp.ExternalLocal), flow)
}

func sourceClass(st *desired.State, flow proxytest.Flow) string {
	l := st.Masquerade.Local
	switch {
	case flow.FromHost:
		return "host"
	case l.Mode == desired.LocalCIDR && slices.ContainsFunc(l.CIDRs, func(p netip.Prefix) bool { return p.Contains(flow.Source) }):
		return "pod"
	case l.Mode == desired.LocalInterface && flow.InInterface == l.Interface:
		return "pod"
	case l.Mode == desired.LocalInterfacePrefix && flow.InInterface != "" && strings.HasPrefix(flow.InInterface, l.Interface):
		return "pod"
	}
	return "external"
}

func dispatch(d desired.Dispatch, masq bool) proxytest.Result {
	if len(d.Endpoints) == 0 {
		return proxytest.Result{Verdict: proxytest.Reject}
	}
	r := proxytest.Result{Verdict: proxytest.DNAT, Masquerade: masq}
	for _, ep := range d.Endpoints {
		r.Endpoints = append(r.Endpoints, ep.AddrPort())
	}
	slices.SortFunc(r.Endpoints, netip.AddrPort.Compare)
	return r
}

func hairpin(r proxytest.Result, flow proxytest.Flow) proxytest.Result {
	if slices.ContainsFunc(r.Endpoints, func(a netip.AddrPort) bool { return a.Addr() == flow.Source }) {
		r.Masquerade = true
	}
	return r
}

func allowed(sp *desired.ServicePort, src netip.Addr) bool {
	return sp.AllowedSources == nil || slices.ContainsFunc(sp.AllowedSources, func(p netip.Prefix) bool { return p.Contains(src) })
}

func onDummy(st *desired.State, a netip.Addr) bool {
	for _, sp := range st.Services.All() {
		if sp.ClusterIP == a || slices.Contains(sp.ExternalIPs, a) || slices.Contains(sp.LoadBalancerIPs, a) {
			return true
		}
	}
	return false
}
