package syncer

import (
	"errors"
	"fmt"
	"maps"
	"slices"

	"k8s.io/klog/v2"

	"github.com/svcproxy/svcproxy/pkg/proxy"
	"github.com/svcproxy/svcproxy/pkg/proxy/desired"
	"github.com/svcproxy/svcproxy/pkg/proxy/model"
)

// maxIsolationSyncs bounds the Proxier.Sync calls spent looking for the
// service ports a rejected sync came from: one offender among n changed
// ports costs about 2·log2(n) calls; past the bound the sync just fails.
const maxIsolationSyncs = 64

// quarantine holds the service ports whose programming the kernel
// rejected, each at the version it rejected. They stay out of the States
// handed to the Proxier until they change (or go), or until the next
// periodic full sync retries them.
type quarantine map[proxy.ServicePortName]*desired.ServicePort

// QuarantineFunc reports a service port kept out of the dataplane because
// the kernel rejected it (for an Event on its Service).
type QuarantineFunc func(name proxy.ServicePortName, err error)

// filter returns state without the quarantined ports that are unchanged,
// and lifts the quarantine of those that changed or are gone. prev is the
// State this one was computed from (nil: computed from scratch).
func (q quarantine) filter(state, prev *desired.State) *desired.State {
	if len(q) == 0 {
		return state
	}
	out := *state
	services := model.NewPortMapEditor(state.Services)
	if state.Changed != nil {
		out.Changed = maps.Clone(state.Changed)
	}
	for name, rejected := range q {
		cur := out.Service(name)
		if cur == nil || !cur.Equal(rejected) {
			delete(q, name) // changed or gone: try it again
			continue
		}
		services.Remove(name)
		if out.Changed != nil {
			if prev.Service(name) != nil {
				out.Changed[name] = struct{}{} // programmed before: remove it
			} else {
				delete(out.Changed, name)
			}
		}
	}
	out.Services = services.Done()
	return &out
}

// isolation is one search for the service ports behind a rejected sync:
// it grows a State the kernel accepts from a base, adding the candidates
// in halves, so that each offender ends up alone in a rejected attempt.
type isolation struct {
	s      *Syncer
	target *desired.State
	// last is the State the Proxier accepted last in this search; nil
	// after a rejection (the next attempt must reconcile everything).
	last  *desired.State
	calls int
	bad   map[proxy.ServicePortName]error
}

// program hands state to the Proxier in mode. When that fails and service
// ports changed, it finds the ones the kernel rejects, quarantines them and
// programs everything else. It returns the State that is now programmed and
// the mode the first attempt ran in. prev is the programmed State state was
// computed from (nil: from scratch).
func (s *Syncer) program(state, prev *desired.State, mode proxy.SyncMode) (*desired.State, proxy.SyncMode, error) {
	mode, err := s.syncProxier(state, mode)
	if err == nil {
		return state, mode, nil
	}
	cands := candidates(state, prev)
	if len(cands) == 0 {
		return nil, mode, err
	}
	base := withServices(state, model.PortMap[*desired.ServicePort]{})
	if prev != nil {
		// What the kernel had before: if even that fails, the fault is
		// not in the changed ports. After the failure the Proxier's
		// record of the kernel is suspect: a recovery sync.
		base = withServices(state, prev.Services)
		if _, berr := s.syncProxier(base, proxy.RecoverySync); berr != nil {
			return nil, mode, err
		}
	}
	klog.InfoS("Sync rejected; looking for the service ports responsible", "ipFamily", s.family, "candidates", len(cands), "err", err)
	iso := &isolation{s: s, target: state, bad: map[proxy.ServicePortName]error{}}
	if prev != nil {
		iso.last = base // programmed just now
	}
	good, ierr := iso.search(base, cands)
	if ierr == nil && iso.last != good {
		ierr = iso.try(good)
	}
	if ierr != nil || len(iso.bad) == 0 {
		// Nothing consistent found (a transient or global failure).
		return nil, mode, errors.Join(err, ierr)
	}
	for name, berr := range iso.bad {
		s.quarantined[name] = state.Service(name)
		klog.ErrorS(berr, "Kernel rejected a service port; keeping it out until it changes", "ipFamily", s.family, "servicePort", name)
		if s.o.Quarantined != nil {
			s.o.Quarantined(name, berr)
		}
	}
	return good, mode, nil
}

// search returns good plus every candidate the kernel accepts with it.
func (iso *isolation) search(good *desired.State, cands []proxy.ServicePortName) (*desired.State, error) {
	services := model.NewPortMapEditor(good.Services)
	for _, name := range cands {
		if sp := iso.target.Service(name); sp != nil {
			services.Set(name, sp)
		} else {
			services.Remove(name)
		}
	}
	trial := withServices(good, services.Done())
	if iso.calls >= maxIsolationSyncs {
		return good, fmt.Errorf("gave up after %d attempts", iso.calls)
	}
	err := iso.try(trial)
	switch {
	case err == nil:
		return trial, nil
	case len(cands) == 1:
		iso.bad[cands[0]] = err
		return good, nil
	}
	mid := len(cands) / 2
	good, err = iso.search(good, cands[:mid])
	if err != nil {
		return good, err
	}
	return iso.search(good, cands[mid:])
}

// try hands trial to the Proxier: a partial sync of what changed since the
// last State it accepted, or a recovery sync after a rejection (or a
// reported loss), when its record of the kernel is suspect.
func (iso *isolation) try(trial *desired.State) error {
	iso.calls++
	trial.Changed = nil
	mode := proxy.RecoverySync
	if iso.last != nil {
		trial.Changed = changedBetween(iso.last, trial)
		mode = proxy.PartialSync
	}
	_, err := iso.s.syncProxier(trial, mode)
	iso.last = nil
	if err == nil && !iso.s.recover {
		iso.last = trial
	}
	return err
}

// candidates are the service ports whose change may have caused a
// rejection, in name order: the changed ones, or all after a full compute.
func candidates(state, prev *desired.State) []proxy.ServicePortName {
	if prev == nil || state.Changed == nil {
		return slices.SortedFunc(state.Services.Keys(), proxy.ServicePortName.Compare)
	}
	return slices.SortedFunc(maps.Keys(state.Changed), proxy.ServicePortName.Compare)
}

// withServices is state with services (immutable, so shared) and Changed
// unset.
func withServices(state *desired.State, services model.PortMap[*desired.ServicePort]) *desired.State {
	out := *state
	out.Services = services
	out.Changed = nil
	return &out
}

// changedBetween lists the service ports that differ between two States
// of one search (by pointer: the search shares the target's values).
func changedBetween(a, b *desired.State) map[proxy.ServicePortName]struct{} {
	changed := map[proxy.ServicePortName]struct{}{}
	for name, sp := range b.Services.All() {
		if a.Service(name) != sp {
			changed[name] = struct{}{}
		}
	}
	for name := range a.Services.All() {
		if b.Service(name) == nil {
			changed[name] = struct{}{}
		}
	}
	return changed
}
