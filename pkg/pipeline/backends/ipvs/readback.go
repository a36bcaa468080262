package ipvs

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"

	"github.com/svcproxy/svcproxy/pkg/klink"
)

// readBack adopts what the kernel already holds for this family: virtual
// servers with their real servers, the dummy link's addresses and the
// members of our ipsets. It runs when the syncs' plan says so (the first
// sync of a process, the one after a failure) and in HeldPorts; the
// following diff then changes only what differs, so a restart with
// unchanged state writes nothing and disturbs no connection.
func (p *Proxier) readBack() error {
	s := p.store
	s.each(anyTable.ForgetKernel)
	svcs, err := p.c.IPVS.ListServices()
	if err != nil {
		return fmt.Errorf("reading back IPVS services: %w", err)
	}
	for _, svc := range svcs {
		if !p.family.Contains(svc.Addr) {
			continue
		}
		dests, err := p.c.IPVS.ListDestinations(svc.ServiceKey)
		if err != nil {
			return fmt.Errorf("reading back IPVS destinations: %w", err)
		}
		v := vsSpec{svc: svc}
		for _, d := range dests {
			if d.Weight == 1 {
				v.dests = append(v.dests, d.Addr)
				continue
			}
			if v.idle == nil {
				v.idle = map[netip.AddrPort]int{}
			}
			v.idle[d.Addr] = d.Weight
		}
		slices.SortFunc(v.dests, netip.AddrPort.Compare)
		s.vs.SetKernel(svc.ServiceKey, v)
	}

	addrs, err := p.c.Link.ListAddrs(DummyLink)
	if err != nil && !errors.Is(err, klink.ErrNotFound) {
		return fmt.Errorf("reading back %s addresses: %w", DummyLink, err)
	}
	for _, a := range addrs {
		if p.family.Contains(a) {
			s.addrs.SetKernel(a, struct{}{})
		}
	}

	for _, spec := range setSpecs {
		name := setName(p.family, spec.name)
		entries, err := p.c.IPSet.ListEntries(name)
		if err != nil {
			return fmt.Errorf("reading back ipset %s: %w", name, err)
		}
		for _, e := range entries {
			s.sets[name].SetKernel(e, struct{}{})
		}
	}
	s.each(anyTable.MarkAllDirty)
	return nil
}
