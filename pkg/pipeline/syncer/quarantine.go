package syncer

import (
	"maps"
	"slices"
	"time"

	"k8s.io/klog/v2"

	"github.com/svcproxy/svcproxy/pkg/pipeline/desired"
	"github.com/svcproxy/svcproxy/pkg/pipeline/model"
	"github.com/svcproxy/svcproxy/pkg/proxy"
)

// quarantined is a service port whose programming the kernel rejected.
type quarantined struct {
	// rejected is the version the kernel refused; the port stays
	// quarantined while its desired version is equal to it. nil: kept by
	// a previous process (persist.go), until apply meets the port.
	rejected *desired.ServicePort
	// held is what the kernel keeps for the port meanwhile: the version it
	// served before (without its load-balancer frontends if the rejected
	// version narrowed their source ranges), or nil for nothing.
	held  *desired.ServicePort
	err   error
	since time.Time
}

// quarantine holds the service ports whose programming the kernel
// rejected. They stay quarantined until their desired version changes (or
// they go), or until a retry finds the kernel accepts them.
type quarantine map[proxy.ServicePortName]*quarantined

// QuarantineFunc reports a service port kept out of the dataplane because
// the kernel rejected it (for an Event on its Service).
type QuarantineFunc func(name proxy.ServicePortName, err error)

// apply returns the State to hand to the Proxier for target: each
// quarantined port still at its rejected version is replaced by what the
// kernel holds for it; the quarantine of a port that changed or went is
// lifted, so that its new version is tried. programmed is the State the
// Proxier holds (needed only when target.Changed is set).
func (q quarantine) apply(target, programmed *desired.State) *desired.State {
	if len(q) == 0 {
		return target
	}
	out := *target
	services := model.NewPortMapEditor(target.Services)
	if target.Changed != nil {
		out.Changed = maps.Clone(target.Changed)
	}
	for name, e := range q {
		cur := target.Service(name)
		if e.rejected == nil && cur != nil {
			// Kept by a previous process: out until retried.
			e.rejected = cur
		}
		if cur == nil || !cur.Equal(e.rejected) {
			delete(q, name)
			continue
		}
		if e.held != nil {
			services.Set(name, e.held)
		} else {
			services.Remove(name)
		}
		if out.Changed == nil {
			continue
		}
		if programmed != nil && programmed.Service(name) == e.held {
			delete(out.Changed, name)
		} else {
			out.Changed[name] = struct{}{}
		}
	}
	out.Services = services.Done()
	return &out
}

// dueForRetry lists, once retryDue is set, the ports quarantined so far,
// in name order; ports this sync quarantines wait for the next retry.
func (s *Syncer) dueForRetry() []proxy.ServicePortName {
	if !s.retryDue {
		return nil
	}
	s.retryDue = false
	return slices.SortedFunc(maps.Keys(s.quarantined), proxy.ServicePortName.Compare)
}

// retryQuarantined tries each port of names that is still quarantined
// again, one at a time, on top of good (the State the Proxier just
// accepted): a cause that has passed (a kernel upgrade, a conflicting
// object gone) must not keep a port out for good. It returns the State now
// programmed.
func (s *Syncer) retryQuarantined(good *desired.State, names []proxy.ServicePortName) (*desired.State, error) {
	iso := s.newIsolation(good, 1)
	iso.last = good
	for _, name := range names {
		e := s.quarantined[name]
		if e == nil {
			continue
		}
		trial := withServices(good, good.Services.With(name, e.rejected))
		if err := iso.try(trial); err != nil {
			e.err = err
			continue
		}
		good = trial
		delete(s.quarantined, name)
		klog.InfoS("Kernel accepts a quarantined service port again", "ipFamily", s.family, "servicePort", name)
	}
	if iso.last != good {
		// The last retry was rejected: the Proxier needs a sync it accepts.
		if err := iso.try(good); err != nil {
			return nil, err
		}
	}
	klog.V(2).InfoS("Retried quarantined service ports", "ipFamily", s.family, "syncs", iso.calls, "stillQuarantined", len(s.quarantined))
	// Readers of State.Changed take nil as "compare everything".
	good.Changed = nil
	return good, nil
}
