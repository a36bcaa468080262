package ipvs

import (
	"errors"
	"fmt"
	"net/netip"

	"github.com/svcproxy/svcproxy/pkg/kipvs"
	"github.com/svcproxy/svcproxy/pkg/klink"
)

// readBack adopts what the kernel already holds for this family: virtual
// servers with their real servers, the dummy link's addresses and the
// members of our ipsets. It runs at the first sync of a process and after
// a failed sync, never otherwise; the following full diff then changes only
// what differs, so a restart with unchanged state writes nothing and
// disturbs no connection.
func (p *Proxier) readBack() error {
	s := p.store
	s.kernelVS = map[kipvs.ServiceKey]*kernelVS{}
	s.kernelAddr = map[netip.Addr]bool{}
	s.kernelEntry = map[setEntry]bool{}
	s.kernelLen = map[string]int{}

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
		kv := &kernelVS{svc: svc, dests: make(map[netip.AddrPort]int, len(dests))}
		for _, d := range dests {
			kv.dests[d.Addr] = d.Weight
		}
		s.kernelVS[svc.ServiceKey] = kv
	}

	addrs, err := p.c.Link.ListAddrs(DummyLink)
	if err != nil && !errors.Is(err, klink.ErrNotFound) {
		return fmt.Errorf("reading back %s addresses: %w", DummyLink, err)
	}
	for _, a := range addrs {
		if p.family.Contains(a) {
			s.kernelAddr[a] = true
		}
	}

	for _, spec := range setSpecs {
		name := setName(p.family, spec.name)
		entries, err := p.c.IPSet.ListEntries(name)
		if err != nil {
			return fmt.Errorf("reading back ipset %s: %w", name, err)
		}
		for _, e := range entries {
			s.setKernelEntry(setEntry{set: name, entry: e}, true)
		}
	}
	s.markAllDirty()
	return nil
}
