package nodestatus

import (
	"net/netip"
	"slices"
	"time"

	"github.com/svcproxy/svcproxy/internal/debugstate"
	"github.com/svcproxy/svcproxy/pkg/pipeline/desired"
	"github.com/svcproxy/svcproxy/pkg/pipeline/syncer"
)

// FromReport is one family's status: its syncer's report r, its health,
// and programmed, the State its last successful sync programmed (nil:
// none).
func FromReport(r *syncer.Report, healthy bool, programmed *desired.State) Family {
	f := Family{Family: r.Family, Healthy: healthy, LastError: r.LastError, ServicePorts: r.ServicePorts,
		Quarantined: make([]Quarantined, 0, len(r.Quarantined))}
	if !r.LastSuccess.IsZero() {
		f.LastSync, f.LastSyncMode = timePtr(r.LastSuccess), r.LastMode
	}
	if !r.LastAttempt.IsZero() {
		f.LastAttempt, f.LastDuration = timePtr(r.LastAttempt), r.LastDuration.Round(time.Microsecond).String()
	}
	if programmed != nil {
		f.Endpoints = countEndpoints(programmed)
	}
	for _, q := range r.Quarantined {
		f.Quarantined = append(f.Quarantined, quarantined(q))
	}
	return f
}

func quarantined(q syncer.QuarantinedPort) Quarantined {
	out := Quarantined{Namespace: q.Name.Namespace, Name: q.Name.Name, PortName: q.Name.Port,
		Protocol: q.Name.Protocol, Error: q.Error, Since: q.Since, Kernel: KernelServesNothing}
	if q.Rejected != nil {
		rejected := debugstate.EncodePort(q.Rejected)
		out.Rejected = &rejected
	}
	switch {
	case q.Held == nil:
	case q.Rejected != nil && len(q.Held.LoadBalancerIPs) == 0 && len(q.Rejected.LoadBalancerIPs) > 0:
		out.Kernel = KernelServesPreviousWithoutLB
	default:
		out.Kernel = KernelServesPrevious
	}
	return out
}

// countEndpoints counts the distinct endpoints (address and port) the
// State sends traffic to.
func countEndpoints(s *desired.State) int {
	var all []netip.AddrPort
	for _, sp := range s.Services.All() {
		for _, d := range []desired.Dispatch{sp.Internal, sp.External, sp.Cluster} {
			for _, ep := range d.Endpoints {
				all = append(all, ep.AddrPort())
			}
		}
	}
	slices.SortFunc(all, netip.AddrPort.Compare)
	return len(slices.Compact(all))
}

func timePtr(t time.Time) *time.Time { return &t }
