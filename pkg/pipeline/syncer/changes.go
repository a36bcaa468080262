package syncer

import (
	"github.com/svcproxy/svcproxy/pkg/pipeline/metrics"
	"github.com/svcproxy/svcproxy/pkg/pipeline/model"
)

// ChangeCounter counts the trackers' events into
// kubeproxy_sync_proxy_rules_{service,endpoint}_changes_{total,pending} when
// they happen, as upstream's change trackers do (a sync that never comes,
// or fails, does not hide them). A sync clears the pending gauges when it
// takes the changes (Commit), as upstream's does.
type ChangeCounter struct{}

var _ model.EventCounter = ChangeCounter{}

// ServiceEvent is part of model.EventCounter. Upstream sets the gauge to
// its tracker's count of Services with a pending change.
func (ChangeCounter) ServiceEvent(pending int) {
	metrics.ServiceChangesTotal.Inc()
	metrics.ServiceChangesPending.Set(float64(pending))
}

// EndpointSliceEvent is part of model.EventCounter. Upstream's gauge counts
// the slice events that left something to sync, not Services.
func (ChangeCounter) EndpointSliceEvent(pending bool) {
	metrics.EndpointChangesTotal.Inc()
	if pending {
		metrics.EndpointChangesPending.Inc()
	}
}

// clearPending is what taking the changes does to the gauges.
func clearPending() {
	metrics.ServiceChangesPending.Set(0)
	metrics.EndpointChangesPending.Set(0)
}
