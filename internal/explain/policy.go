package explain

import (
	"slices"

	"github.com/svcproxy/svcproxy/pkg/proxy/desired"
)

// internal is the cluster-IP path: the Internal dispatch, masqueraded with
// masqueradeAll or when a detector says the source is not a pod.
func (e *Explanation) internal(state *desired.State, sp *desired.ServicePort) {
	e.Class = ClassInternal
	e.Policy = "internalTrafficPolicy: Cluster"
	if isLocalOnly(sp.Internal, sp.Cluster) {
		e.Policy = "internalTrafficPolicy: Local"
		e.because("internalTrafficPolicy is Local: only endpoints on this node serve the cluster IP")
	}
	masq := false
	switch {
	case state.Masquerade.All:
		masq = true
		e.because("masqueradeAll is set: cluster-IP traffic is masqueraded")
	case state.Masquerade.Local.Mode != desired.LocalNone && e.Source != "pod":
		masq = true
		e.because("traffic to a cluster IP that is not from a pod is masqueraded (so replies come back through this node)")
	}
	e.dispatch(sp, sp.Internal, masq)
}

// external is the path of external IPs, LB IPs and node ports.
func (e *Explanation) external(sp *desired.ServicePort) {
	if !sp.ExternalLocal {
		e.Class, e.Policy = ClassExternal, "externalTrafficPolicy: Cluster"
		e.because("externalTrafficPolicy is Cluster: any ready endpoint in the cluster, and the packet is masqueraded")
		e.dispatch(sp, sp.External, true)
		return
	}
	e.Policy = "externalTrafficPolicy: Local"
	switch e.Source {
	case "pod":
		e.Class = ClassCluster
		e.because("externalTrafficPolicy is Local, but traffic from a pod is short-circuited to the cluster-wide endpoints, unmasqueraded")
		e.dispatch(sp, sp.Cluster, false)
	case "host":
		e.Class = ClassCluster
		e.because("externalTrafficPolicy is Local, but traffic from the node itself goes to the cluster-wide endpoints, masqueraded")
		e.dispatch(sp, sp.Cluster, true)
	default:
		e.Class = ClassExternal
		e.because("externalTrafficPolicy is Local: only endpoints on this node, and the client source IP is kept")
		e.dispatch(sp, sp.External, false)
	}
}

// dispatch fills the verdict from a dispatch: DNAT to its endpoints, or its
// empty verdict with the reason upstream gives it.
func (e *Explanation) dispatch(sp *desired.ServicePort, d desired.Dispatch, masq bool) {
	if len(d.Endpoints) == 0 {
		if d.Empty == desired.Drop {
			e.Verdict = Drop
			e.because("no endpoint on this node for a Local policy: dropped (the load balancer's health check steers clients elsewhere)")
		} else {
			e.Verdict = Reject
			e.because("the Service has no usable endpoint (none ready, none serving and terminating): rejected with ICMP port unreachable / TCP reset")
		}
		return
	}
	e.Verdict = DNAT
	for _, ep := range d.Endpoints {
		e.Endpoints = append(e.Endpoints, ep.AddrPort())
		if e.Packet.Source.IsValid() && ep.IP == e.Packet.Source && !masq {
			masq = true
			e.because("the client %s is itself an endpoint (hairpin): masqueraded so the reply returns through the node", e.Packet.Source)
		}
	}
	e.because("%d endpoint(s), picked at random per connection: %s", len(e.Endpoints), joinAddrPorts(e.Endpoints))
	e.Masquerade = masq
	if sp.AffinitySeconds > 0 {
		e.Affinity = sp.AffinitySeconds
		e.because("sessionAffinity ClientIP: a client sticks to its endpoint for %d s after its last packet", sp.AffinitySeconds)
	}
}

// isLocalOnly infers internalTrafficPolicy: Local, which the State does
// not name: a Local internal dispatch drops when empty, or differs from the
// cluster-wide set.
func isLocalOnly(internal, cluster desired.Dispatch) bool {
	if len(internal.Endpoints) == 0 {
		return internal.Empty == desired.Drop
	}
	return !slices.EqualFunc(internal.Endpoints, cluster.Endpoints, func(a, b desired.Endpoint) bool {
		return a.AddrPort() == b.AddrPort()
	})
}
