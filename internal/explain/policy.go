package explain

import (
	"github.com/svcproxy/svcproxy/pkg/pipeline/desired"
)

// route words the route the outcome took: the traffic policy, why it is
// (not) masqueraded, and the dispatch's endpoints or empty verdict.
func (e *Explanation) route(out desired.Outcome) {
	sp := out.Port
	e.Class = out.Route.Set.String()
	if out.Frontend == desired.ClusterIPFrontend {
		e.Policy = "internalTrafficPolicy: Cluster"
		if sp.InternalLocal {
			e.Policy = "internalTrafficPolicy: Local"
			e.because("internalTrafficPolicy is Local: only endpoints on this node serve the cluster IP")
		}
	} else {
		e.Policy = "externalTrafficPolicy: Cluster"
		if sp.ExternalLocal {
			e.Policy = "externalTrafficPolicy: Local"
		}
	}
	if why := whyText[out.Route.Why]; why != "" {
		e.because("%s", why)
	}
	e.dispatch(sp, out)
}

// whyText words desired's reasons for a route; "" adds no sentence.
var whyText = map[desired.Why]string{
	desired.WhyMasqueradeAll:   "masqueradeAll is set: cluster-IP traffic is masqueraded",
	desired.WhyNotPod:          "traffic to a cluster IP that is not from a pod is masqueraded (so replies come back through this node)",
	desired.WhyExternalCluster: "externalTrafficPolicy is Cluster: any ready endpoint in the cluster, and the packet is masqueraded",
	desired.WhyPodShortcut:     "externalTrafficPolicy is Local, but traffic from a pod is short-circuited to the cluster-wide endpoints, unmasqueraded",
	desired.WhyNodeShortcut:    "externalTrafficPolicy is Local, but traffic from the node itself goes to the cluster-wide endpoints, masqueraded",
	desired.WhyExternalLocal:   "externalTrafficPolicy is Local: only endpoints on this node, and the client source IP is kept",
}

// dispatch fills the verdict from the outcome: DNAT to its endpoints, or
// its empty verdict with the reason upstream gives it.
func (e *Explanation) dispatch(sp *desired.ServicePort, out desired.Outcome) {
	if out.Verdict != desired.DNAT {
		if out.Verdict == desired.Drop {
			e.Verdict = Drop
			e.because("no endpoint on this node for a Local policy: dropped (the load balancer's health check steers clients elsewhere)")
		} else {
			e.Verdict = Reject
			e.because("the Service has no usable endpoint (none ready, none serving and terminating): rejected with ICMP port unreachable / TCP reset")
		}
		return
	}
	e.Verdict = DNAT
	for _, ep := range out.Endpoints {
		e.Endpoints = append(e.Endpoints, ep.AddrPort())
	}
	if out.Hairpin && !out.Route.Masquerade {
		e.because("the client %s is itself an endpoint (hairpin): masqueraded so the reply returns through the node", e.Packet.Source)
	}
	e.because("%d endpoint(s), picked at random per connection: %s", len(e.Endpoints), joinAddrPorts(e.Endpoints))
	e.Masquerade = out.Masquerade
	if sp.AffinitySeconds > 0 {
		e.Affinity = sp.AffinitySeconds
		e.because("sessionAffinity ClientIP: a client sticks to its endpoint for %d s after its last packet", sp.AffinitySeconds)
	}
}
