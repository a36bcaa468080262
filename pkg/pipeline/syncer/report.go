package syncer

import (
	"maps"
	"slices"
	"time"

	"github.com/svcproxy/svcproxy/pkg/pipeline/desired"
	"github.com/svcproxy/svcproxy/pkg/proxy"
)

// Report is what a Syncer tells operators about its family (svcproxy
// status and services). A published Report is never modified.
type Report struct {
	Family proxy.IPFamily
	// LastAttempt is when the last sync attempt ended; zero before the
	// first. LastDuration is how long it took, LastError why it failed
	// ("" when it succeeded).
	LastAttempt  time.Time
	LastDuration time.Duration
	LastError    string
	// LastSuccess is when the last successful sync ended, LastMode what
	// it reconciled (partial, full, recovery) and ServicePorts how many
	// service ports it programmed.
	LastSuccess  time.Time
	LastMode     string
	ServicePorts int
	// Quarantined lists the service ports the kernel rejected, by name.
	Quarantined []QuarantinedPort
}

// QuarantinedPort is a service port kept out of the dataplane because
// the kernel rejected it.
type QuarantinedPort struct {
	Name proxy.ServicePortName
	// Rejected is the version the kernel refused; nil while a port that a
	// previous process quarantined has not been met again.
	Rejected *desired.ServicePort
	// Held is what the kernel serves for the port meanwhile: the version
	// before the rejected one (perhaps without its load-balancer
	// frontends), or nil for nothing.
	Held  *desired.ServicePort
	Error string
	Since time.Time
}

// Report returns the family's latest Report; safe to call from any
// goroutine. Before the first sync attempt it holds only the family.
func (s *Syncer) Report() *Report {
	if r := s.report.Load(); r != nil {
		return r
	}
	return &Report{Family: s.o.Family}
}

// publish records the outcome of the sync attempt that ran from start to
// end, programming state in mode (nil state: it failed with err).
func (s *Syncer) publish(state *desired.State, mode proxy.SyncMode, err error, start, end time.Time) {
	r := *s.Report()
	r.LastAttempt, r.LastDuration, r.LastError = end, end.Sub(start), ""
	if err != nil {
		r.LastError = err.Error()
	} else {
		r.LastSuccess, r.LastMode, r.ServicePorts = end, mode.String(), state.Services.Len()
	}
	r.Quarantined = make([]QuarantinedPort, 0, len(s.quarantined))
	for _, name := range slices.SortedFunc(maps.Keys(s.quarantined), proxy.ServicePortName.Compare) {
		e := s.quarantined[name]
		q := QuarantinedPort{Name: name, Rejected: e.rejected, Held: e.held, Since: e.since}
		if e.err != nil {
			q.Error = e.err.Error()
		}
		r.Quarantined = append(r.Quarantined, q)
	}
	s.report.Store(&r)
}
