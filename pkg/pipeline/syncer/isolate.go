package syncer

import (
	"errors"
	"fmt"
	"math/bits"
	"net/netip"
	"slices"

	"k8s.io/klog/v2"

	"github.com/svcproxy/svcproxy/pkg/pipeline/desired"
	"github.com/svcproxy/svcproxy/pkg/pipeline/model"
	"github.com/svcproxy/svcproxy/pkg/proxy"
)

// maxIsolationSyncs bounds the Proxier.Sync calls one search may spend,
// whatever it finds: a kernel that refuses nearly everything is failing as
// a whole, not per service port.
const maxIsolationSyncs = 4096

// isolation is one search for the service ports behind a rejected sync:
// it grows a State the kernel accepts from a base, adding the candidates
// in halves, so that each offender ends up alone in a rejected attempt.
// Every State it tries holds the base and everything accepted so far:
// a port the kernel serves stays served while the search runs.
type isolation struct {
	s      *Syncer
	target *desired.State
	// last is the State the Proxier accepted last in this search; nil
	// after a rejection (the next attempt must reconcile everything).
	last *desired.State
	// perOffender is what finding one offender among the candidates
	// costs at most (about 2·log2 of their number); the search may
	// spend that much again for each offender found.
	perOffender int
	calls       int
	bad         map[proxy.ServicePortName]error
}

// program hands state to the Proxier in mode. When that fails, it finds the
// service ports the kernel rejects, quarantines them and programs
// everything else. It returns the State that is now programmed and the mode
// the first attempt ran in.
//
// The search grows from a base the kernel serves already (searchBase), and
// only the ports that differ from it are suspects: what the kernel served
// before the failure keeps being served while the search runs.
func (s *Syncer) program(state *desired.State, mode proxy.SyncMode) (*desired.State, proxy.SyncMode, error) {
	mode, err := s.syncProxier(state, mode)
	if err == nil {
		return state, mode, nil
	}
	// Only a sync from the last accepted State can leave it in place.
	kept := mode != proxy.RecoverySync && errors.Is(err, proxy.ErrNotApplied)
	base, cands, ok := s.searchBase(state, kept)
	if !ok {
		return nil, mode, err
	}
	klog.InfoS("Sync rejected; looking for the service ports responsible", "ipFamily", s.family, "candidates", len(cands),
		"kept", base.Services.Len(), "err", err)
	iso := s.newIsolation(state, len(cands))
	if base.Services.Len() > 0 && !s.recover {
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
	klog.InfoS("Found the service ports the kernel rejects", "ipFamily", s.family, "offenders", len(iso.bad), "syncs", iso.calls)
	for name, berr := range iso.bad {
		s.quarantine(name, state.Service(name), good.Service(name), berr)
	}
	// Readers of State.Changed take nil as "compare everything".
	good.Changed = nil
	return good, mode, nil
}

// searchBase programs the State the search for state's rejected ports
// grows from, and returns it with the candidates: the ports that differ
// from it. ok is false when the fault cannot be any port's: none differs,
// or even the last accepted State is rejected now.
//
//   - the last State the Proxier accepted (kept across failures), its
//     ports as they were; kept: the rejected sync applied nothing
//     (proxy.ErrNotApplied), so the Proxier still holds it;
//   - without one (the first sync of this process), the ports the kernel
//     already holds as the Proxier would program them (PortHolder): their
//     sync changes nothing for them. A port the kernel holds in another
//     version (changed while no process ran, or rendered otherwise by this
//     version) is a candidate like a new one: the base's sync takes it out
//     until the search adds it back. If the base is rejected the search
//     starts from nothing;
//   - nothing: the search takes every port out and adds them back.
func (s *Syncer) searchBase(state *desired.State, kept bool) (base *desired.State, cands []proxy.ServicePortName, ok bool) {
	if last := s.lastGood; last != nil {
		cands = candidates(state, last)
		if len(cands) == 0 {
			return nil, nil, false
		}
		// If even what the kernel had before fails, the fault is not in
		// the changed ports (a full sync also redoes what a backend
		// ensures only then). After a failure that applied something the
		// Proxier's record of the kernel is suspect: a recovery sync.
		base = withServices(state, guarded(last.Services, state, cands))
		mode := proxy.RecoverySync
		if kept {
			mode = proxy.FullSync
		}
		_, err := s.syncProxier(base, mode)
		return base, cands, err == nil
	}
	if held := s.heldState(state); held != nil {
		cands = candidates(state, held)
		if len(cands) == 0 {
			return nil, nil, false
		}
		// HeldPorts has just read the kernel back.
		_, err := s.syncProxier(held, proxy.FullSync)
		if err == nil {
			return held, cands, true
		}
		klog.InfoS("The service ports the kernel holds are rejected too; searching from none", "ipFamily", s.family, "err", err)
	}
	return withServices(state, model.PortMap[*desired.ServicePort]{}), candidates(state, nil), true
}

// heldState is state with only the service ports the kernel holds as the
// Proxier would program them, or nil when it holds none or cannot tell.
func (s *Syncer) heldState(state *desired.State) *desired.State {
	h := s.o.Proxier.PortHolder
	if h == nil {
		return nil
	}
	held, err := h.HeldPorts(s.ctx, state)
	if err != nil {
		klog.InfoS("Could not tell which service ports the kernel holds; searching from none", "ipFamily", s.family, "err", err)
		return nil
	}
	if len(held) == 0 {
		return nil
	}
	services := model.NewPortMapEditor(state.Services)
	for name := range state.Services.Keys() {
		if _, ok := held[name]; !ok {
			services.Remove(name)
		}
	}
	return withServices(state, services.Done())
}

func (s *Syncer) newIsolation(target *desired.State, candidates int) *isolation {
	return &isolation{s: s, target: target, bad: map[proxy.ServicePortName]error{},
		perOffender: 2*bits.Len(uint(candidates)) + 2}
}

// quarantine records a rejected service port and reports it.
func (s *Syncer) quarantine(name proxy.ServicePortName, rejected, held *desired.ServicePort, err error) {
	s.quarantined[name] = &quarantined{rejected: rejected, held: held, err: err, since: s.clock.Now()}
	klog.ErrorS(err, "Kernel rejected a service port; keeping it out until it changes", "ipFamily", s.family,
		"servicePort", name, "previousVersionKept", held != nil)
	if s.o.Quarantined != nil {
		s.o.Quarantined(name, err)
	}
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
	if budget := min(iso.perOffender*(len(iso.bad)+1), maxIsolationSyncs); iso.calls >= budget {
		return good, fmt.Errorf("gave up after %d attempts, %d offenders found", iso.calls, len(iso.bad))
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
// last State it accepted, or a recovery sync after a rejection that may
// have applied part of a trial (or a reported loss), when its record of
// the kernel is suspect. A rejection that applied nothing
// (proxy.ErrNotApplied) leaves the last accepted State in place.
func (iso *isolation) try(trial *desired.State) error {
	iso.calls++
	trial.Changed = nil
	mode := proxy.RecoverySync
	if iso.last != nil {
		trial.Changed = changedBetween(iso.last, trial)
		mode = proxy.PartialSync
	}
	_, err := iso.s.syncProxier(trial, mode)
	switch {
	case err == nil && !iso.s.recover:
		iso.last = trial
	case err == nil || !errors.Is(err, proxy.ErrNotApplied):
		iso.last = nil
	}
	return err
}

// candidates are the service ports whose change may have caused a
// rejection, in name order: those that differ from last (all of them
// without one). A port the kernel served in last is no suspect while it
// stays as it was, so a failure two ports cause only together is blamed on
// the one that changed since, whatever their names.
func candidates(state, last *desired.State) []proxy.ServicePortName {
	var out []proxy.ServicePortName
	for name, sp := range state.Services.All() {
		if last == nil || !sp.Equal(last.Service(name)) {
			out = append(out, name)
		}
	}
	if last != nil {
		for name := range last.Services.Keys() {
			if state.Service(name) == nil {
				out = append(out, name)
			}
		}
	}
	slices.SortFunc(out, proxy.ServicePortName.Compare)
	return out
}

// guarded is services as the kernel may keep serving them while the
// candidates' new versions are tried: unchanged, except that a candidate
// whose new version narrows its load-balancer source ranges loses its
// load-balancer frontends meanwhile, so that the wider ranges never stay
// open because the narrower ones were rejected (a port being deleted too).
func guarded(services model.PortMap[*desired.ServicePort], target *desired.State, cands []proxy.ServicePortName) model.PortMap[*desired.ServicePort] {
	edit := model.NewPortMapEditor(services)
	for _, name := range cands {
		old, ok := services.Get(name)
		if !ok || len(old.LoadBalancerIPs) == 0 {
			continue
		}
		if next := target.Service(name); next != nil && !narrows(old.AllowedSources, next.AllowedSources) {
			continue
		}
		closed := *old
		closed.LoadBalancerIPs, closed.AllowedSources = nil, nil
		edit.Set(name, &closed)
	}
	return edit.Done()
}

// narrows reports whether the source ranges next let through less than old
// does (nil: no firewall, everything passes).
func narrows(old, next []netip.Prefix) bool {
	if next == nil {
		return false
	}
	if old == nil {
		return true
	}
	for _, p := range old {
		if !slices.ContainsFunc(next, func(q netip.Prefix) bool { return q.Bits() <= p.Bits() && q.Contains(p.Addr()) }) {
			return true
		}
	}
	return false
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
