package ipvs

import (
	"errors"
	"maps"
	"net/netip"
	"slices"

	"github.com/svcproxy/svcproxy/pkg/kipset"
	"github.com/svcproxy/svcproxy/pkg/kipvs"
	"github.com/svcproxy/svcproxy/pkg/pipeline/reconcile"
)

// apply makes the kernel match the claims for every dirty key, in the
// store's phase order. The kernel side changes only for calls that
// succeed; a failed call is reported and the rest go on, so one bad object
// does not block the others. A set the members to add would overflow is
// resized first (capacity.go).
func (p *Proxier) apply() error {
	s := p.store
	steps := [][]reconcile.Step{reconcile.Each(s.vs, p.applyVS), reconcile.Each(s.addrs, reconcile.AllOrNothing(p.applyAddr))}
	adds := map[string]int{}
	for _, spec := range setSpecs {
		name := setName(p.family, spec.name)
		set := reconcile.Each(s.sets[name], reconcile.AllOrNothing(func(c reconcile.Change[kipset.Entry, struct{}]) error {
			if c.Op == reconcile.Delete {
				return p.c.IPSet.DelEntry(name, c.Key)
			}
			return p.c.IPSet.AddEntry(name, c.Key)
		}))
		for _, st := range set {
			if st.Phase == phaseEntryAdd {
				adds[name] = st.Len
			}
		}
		steps = append(steps, set)
	}
	return errors.Join(p.ensureCapacity(adds), reconcile.RunAll(steps...))
}

func (p *Proxier) applyAddr(c reconcile.Change[netip.Addr, struct{}]) error {
	if c.Op == reconcile.Delete {
		return p.c.Link.DelAddr(DummyLink, c.Key)
	}
	return p.c.Link.AddAddr(DummyLink, c.Key)
}

// applyVS creates, updates or deletes one virtual server and sets its real
// servers, and returns what the kernel holds afterwards.
func (p *Proxier) applyVS(c reconcile.Change[kipvs.ServiceKey, vsSpec]) (reconcile.Result[vsSpec], error) {
	if c.Op == reconcile.Delete {
		if err := p.deleteVS(c.Key); err != nil {
			return reconcile.Unchanged(c), err
		}
		return reconcile.Result[vsSpec]{}, nil
	}
	want, have := c.Want, c.Have
	switch {
	case c.Op == reconcile.Add:
		if err := p.c.IPVS.AddService(want.svc); err != nil {
			return reconcile.Unchanged(c), err
		}
		have = vsSpec{svc: want.svc}
	case have.svc != want.svc:
		if err := p.c.IPVS.UpdateService(want.svc); err != nil {
			return reconcile.Unchanged(c), err
		}
		have.svc = want.svc
	}
	have, err := p.setServers(c.Key, want.dests, have)
	return reconcile.Result[vsSpec]{Value: have, Present: true}, err
}

// setServers gives the wanted real servers of virtual server k weight 1,
// and returns the kernel's virtual server, have, afterwards. Real servers
// that are no longer wanted are not deleted here: they get weight 0 (no
// new connections) and the reaper deletes them once their connections are
// gone.
func (p *Proxier) setServers(k kipvs.ServiceKey, want []netip.AddrPort, have vsSpec) (vsSpec, error) {
	serving := make([]netip.AddrPort, 0, len(want))
	idle := maps.Clone(have.idle)
	if idle == nil {
		idle = map[netip.AddrPort]int{}
	}
	var errs []error
	for _, d := range want {
		if holdsServer(have.dests, d) {
			serving = append(serving, d)
			continue
		}
		dest := kipvs.Destination{Addr: d, Weight: 1}
		var err error
		if _, drained := idle[d]; drained {
			err = p.c.IPVS.UpdateDestination(k, dest)
		} else {
			err = p.c.IPVS.AddDestination(k, dest)
		}
		if err != nil {
			errs = append(errs, err)
			continue
		}
		serving = append(serving, d)
		delete(idle, d)
		delete(p.terminating, rsKey{k, d})
	}
	for _, d := range have.dests {
		if !slices.Contains(want, d) {
			idle[d] = 1 // drained below
		}
	}
	for d, w := range idle {
		if slices.Contains(want, d) {
			continue // its weight 1 failed: reported above
		}
		if w != 0 {
			if err := p.c.IPVS.UpdateDestination(k, kipvs.Destination{Addr: d, Weight: 0}); err != nil {
				errs = append(errs, err)
				if w == 1 {
					serving = append(serving, d)
					delete(idle, d)
				}
				continue
			}
			idle[d] = 0
		}
		if _, ok := p.terminating[rsKey{k, d}]; !ok {
			p.terminating[rsKey{k, d}] = p.opts.Now()
		}
	}
	slices.SortFunc(serving, netip.AddrPort.Compare)
	if len(idle) == 0 {
		idle = nil
	}
	return vsSpec{svc: have.svc, dests: serving, idle: idle}, errors.Join(errs...)
}

// deleteVS removes a virtual server nobody wants, unless it lies inside
// ExcludeCIDRs: those belong to someone else and are never touched.
func (p *Proxier) deleteVS(k kipvs.ServiceKey) error {
	if p.excluded(k.Addr) {
		return nil
	}
	if err := p.c.IPVS.DeleteService(k); err != nil && !errors.Is(err, kipvs.ErrNotFound) {
		return err
	}
	for rs := range p.terminating {
		if rs.vs == k {
			delete(p.terminating, rs)
		}
	}
	return nil
}

func (p *Proxier) excluded(a netip.Addr) bool {
	return slices.ContainsFunc(p.opts.ExcludeCIDRs, func(c netip.Prefix) bool { return c.Contains(a) })
}
