package ipvs

import (
	"errors"
	"net/netip"
	"slices"

	"github.com/svcproxy/svcproxy/pkg/kipvs"
)

// apply makes the kernel match the desired side for every dirty key, in
// an order that never leaves a bound address without its virtual server:
// virtual servers first, then addresses and set members in, then members
// and addresses out, then virtual servers out. The committed side changes
// only for calls that succeed; a failed call is reported and the rest go
// on, so one bad object does not block the others.
func (p *Proxier) apply() error {
	s := p.store
	var errs []error
	keep := func(err error) {
		if err != nil {
			errs = append(errs, err)
		}
	}
	var gone []kipvs.ServiceKey
	for k := range s.dirtyVS {
		if want := s.desiredVS(k); want != nil {
			keep(p.applyVS(want))
		} else if s.kernelVS[k] != nil {
			gone = append(gone, k)
		}
	}
	for a := range s.dirtyAddr {
		if s.claimAddr[a] > 0 && !s.kernelAddr[a] {
			if err := p.c.Link.AddAddr(DummyLink, a); err != nil {
				keep(err)
			} else {
				s.kernelAddr[a] = true
			}
		}
	}
	for e := range s.dirtyEntry {
		if s.claimEntry[e] > 0 && !s.kernelEntry[e] {
			if err := p.c.IPSet.AddEntry(e.set, e.entry); err != nil {
				keep(err)
			} else {
				s.setKernelEntry(e, true)
			}
		}
	}
	for e := range s.dirtyEntry {
		if s.claimEntry[e] == 0 && s.kernelEntry[e] {
			if err := p.c.IPSet.DelEntry(e.set, e.entry); err != nil {
				keep(err)
			} else {
				s.setKernelEntry(e, false)
			}
		}
	}
	for a := range s.dirtyAddr {
		if s.claimAddr[a] == 0 && s.kernelAddr[a] {
			if err := p.c.Link.DelAddr(DummyLink, a); err != nil {
				keep(err)
			} else {
				delete(s.kernelAddr, a)
			}
		}
	}
	for _, k := range gone {
		keep(p.deleteVS(k))
	}
	s.clearDirty()
	return errors.Join(errs...)
}

// applyVS creates or updates one virtual server and its real servers.
// Real servers that are no longer wanted are not deleted here: they get
// weight 0 (no new connections) and the reaper deletes them once their
// connections are gone.
func (p *Proxier) applyVS(want *vsSpec) error {
	s := p.store
	k := want.svc.ServiceKey
	have := s.kernelVS[k]
	switch {
	case have == nil:
		if err := p.c.IPVS.AddService(want.svc); err != nil {
			return err
		}
		have = &kernelVS{svc: want.svc, dests: map[netip.AddrPort]int{}}
		s.kernelVS[k] = have
	case have.svc != want.svc:
		if err := p.c.IPVS.UpdateService(want.svc); err != nil {
			return err
		}
		have.svc = want.svc
	}
	var errs []error
	for _, d := range want.dests {
		w, present := have.dests[d]
		if present && w == 1 {
			continue
		}
		var err error
		if present {
			err = p.c.IPVS.UpdateDestination(k, kipvs.Destination{Addr: d, Weight: 1})
		} else {
			err = p.c.IPVS.AddDestination(k, kipvs.Destination{Addr: d, Weight: 1})
		}
		if err != nil {
			errs = append(errs, err)
			continue
		}
		have.dests[d] = 1
		delete(p.terminating, rsKey{k, d})
	}
	for d, w := range have.dests {
		if slices.Contains(want.dests, d) {
			continue
		}
		if w != 0 {
			if err := p.c.IPVS.UpdateDestination(k, kipvs.Destination{Addr: d, Weight: 0}); err != nil {
				errs = append(errs, err)
				continue
			}
			have.dests[d] = 0
		}
		if _, ok := p.terminating[rsKey{k, d}]; !ok {
			p.terminating[rsKey{k, d}] = p.opts.Now()
		}
	}
	return errors.Join(errs...)
}

// deleteVS removes a virtual server nobody wants, unless it lies inside
// ExcludeCIDRs: those belong to someone else and are never touched.
func (p *Proxier) deleteVS(k kipvs.ServiceKey) error {
	if p.excluded(k.Addr) {
		delete(p.store.kernelVS, k)
		return nil
	}
	if err := p.c.IPVS.DeleteService(k); err != nil && !errors.Is(err, kipvs.ErrNotFound) {
		return err
	}
	delete(p.store.kernelVS, k)
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
