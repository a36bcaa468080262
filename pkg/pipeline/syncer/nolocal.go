package syncer

import (
	"github.com/svcproxy/svcproxy/pkg/pipeline/desired"
	"github.com/svcproxy/svcproxy/pkg/pipeline/metrics"
)

// noLocalCounts counts the service ports whose Local traffic policy leaves
// them without an endpoint on this node, for
// kubeproxy_sync_proxy_rules_no_local_endpoints_total. It is kept up to
// date from State.Changed so that a partial sync stays O(changes).
type noLocalCounts struct {
	internal, external int
}

// update recounts everything after a full sync (prev nil or Changed nil)
// and only the changed ports otherwise.
func (c *noLocalCounts) update(prev, state *desired.State) {
	if prev == nil || state.Changed == nil {
		*c = noLocalCounts{}
		for _, sp := range state.Services.All() {
			c.add(sp, 1)
		}
		return
	}
	for name := range state.Changed {
		c.add(prev.Service(name), -1)
		c.add(state.Service(name), 1)
	}
}

// add adds sign times sp's contribution; sp may be nil (port absent).
func (c *noLocalCounts) add(sp *desired.ServicePort, sign int) {
	if sp == nil {
		return
	}
	// A Drop verdict on an empty internal dispatch is what an
	// internalTrafficPolicy: Local port without local endpoints gets
	// (a port with no endpoints anywhere rejects instead).
	if len(sp.Internal.Endpoints) == 0 && sp.Internal.Empty == desired.Drop {
		c.internal += sign
	}
	if sp.ExternalLocal && len(sp.External.Endpoints) == 0 {
		c.external += sign
	}
}

func (c *noLocalCounts) publish(family string) {
	metrics.SyncProxyRulesNoLocalEndpointsTotal.WithLabelValues(metrics.TrafficPolicyInternal, family).Set(float64(c.internal))
	metrics.SyncProxyRulesNoLocalEndpointsTotal.WithLabelValues(metrics.TrafficPolicyExternal, family).Set(float64(c.external))
}
