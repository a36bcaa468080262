package ipvs

import (
	"net/netip"

	"github.com/svcproxy/svcproxy/pkg/kipvs"
	"github.com/svcproxy/svcproxy/pkg/proxy"
)

// owner is the service port a part belongs to.
type owner = proxy.ServicePortName

// store keeps two views of this family's kernel objects: what the service
// ports claim (desired) and what this Proxier last committed (kernel).
// Sync swaps the parts of changed service ports, which marks the touched
// keys dirty, and the diff looks only at dirty keys.
type store struct {
	parts map[owner]*part

	claimVS    map[kipvs.ServiceKey][]vsClaim
	claimAddr  map[netip.Addr]int
	claimEntry map[setEntry]int

	kernelVS    map[kipvs.ServiceKey]*kernelVS
	kernelAddr  map[netip.Addr]bool
	kernelEntry map[setEntry]bool
	// kernelLen counts kernelEntry's members per set (capacity.go).
	kernelLen map[string]int

	dirtyVS    map[kipvs.ServiceKey]struct{}
	dirtyAddr  map[netip.Addr]struct{}
	dirtyEntry map[setEntry]struct{}
}

type vsClaim struct {
	owner owner
	spec  vsSpec
}

// kernelVS is a committed virtual server with its real servers' weights
// (weight 0: terminating, waiting for the reaper).
type kernelVS struct {
	svc   kipvs.Service
	dests map[netip.AddrPort]int
}

func newStore() *store {
	s := &store{
		parts:       map[owner]*part{},
		claimVS:     map[kipvs.ServiceKey][]vsClaim{},
		claimAddr:   map[netip.Addr]int{},
		claimEntry:  map[setEntry]int{},
		kernelVS:    map[kipvs.ServiceKey]*kernelVS{},
		kernelAddr:  map[netip.Addr]bool{},
		kernelEntry: map[setEntry]bool{},
		kernelLen:   map[string]int{},
	}
	s.clearDirty()
	return s
}

func (s *store) clearDirty() {
	s.dirtyVS = map[kipvs.ServiceKey]struct{}{}
	s.dirtyAddr = map[netip.Addr]struct{}{}
	s.dirtyEntry = map[setEntry]struct{}{}
}

// setKernelEntry records whether the kernel holds e.
func (s *store) setKernelEntry(e setEntry, present bool) {
	switch {
	case present && !s.kernelEntry[e]:
		s.kernelEntry[e] = true
		s.kernelLen[e.set]++
	case !present && s.kernelEntry[e]:
		delete(s.kernelEntry, e)
		s.kernelLen[e.set]--
	}
}

// markAllDirty makes the next diff look at every known key, desired or
// committed (a full sync).
func (s *store) markAllDirty() {
	for k := range s.claimVS {
		s.dirtyVS[k] = struct{}{}
	}
	for k := range s.kernelVS {
		s.dirtyVS[k] = struct{}{}
	}
	for a := range s.claimAddr {
		s.dirtyAddr[a] = struct{}{}
	}
	for a := range s.kernelAddr {
		s.dirtyAddr[a] = struct{}{}
	}
	for e := range s.claimEntry {
		s.dirtyEntry[e] = struct{}{}
	}
	for e := range s.kernelEntry {
		s.dirtyEntry[e] = struct{}{}
	}
}

// replace swaps o's claims for p's (either may be nil).
func (s *store) replace(o owner, p *part) {
	if old := s.parts[o]; old != nil {
		s.release(o, old)
		delete(s.parts, o)
	}
	if p != nil {
		s.claim(o, p)
		s.parts[o] = p
	}
}

// resetClaims drops every claim, before a full sync re-claims everything.
func (s *store) resetClaims() {
	s.markAllDirty()
	s.parts = map[owner]*part{}
	s.claimVS = map[kipvs.ServiceKey][]vsClaim{}
	s.claimAddr = map[netip.Addr]int{}
	s.claimEntry = map[setEntry]int{}
}

func (s *store) claim(o owner, p *part) {
	for _, v := range p.vs {
		s.claimVS[v.svc.ServiceKey] = append(s.claimVS[v.svc.ServiceKey], vsClaim{owner: o, spec: v})
		s.dirtyVS[v.svc.ServiceKey] = struct{}{}
	}
	for _, a := range p.addrs {
		s.claimAddr[a]++
		s.dirtyAddr[a] = struct{}{}
	}
	for _, e := range p.entries {
		s.claimEntry[e]++
		s.dirtyEntry[e] = struct{}{}
	}
}

func (s *store) release(o owner, p *part) {
	for _, v := range p.vs {
		k := v.svc.ServiceKey
		claims := s.claimVS[k][:0]
		for _, c := range s.claimVS[k] {
			if c.owner != o {
				claims = append(claims, c)
			}
		}
		if len(claims) == 0 {
			delete(s.claimVS, k)
		} else {
			s.claimVS[k] = claims
		}
		s.dirtyVS[k] = struct{}{}
	}
	for _, a := range p.addrs {
		if s.claimAddr[a]--; s.claimAddr[a] <= 0 {
			delete(s.claimAddr, a)
		}
		s.dirtyAddr[a] = struct{}{}
	}
	for _, e := range p.entries {
		if s.claimEntry[e]--; s.claimEntry[e] <= 0 {
			delete(s.claimEntry, e)
		}
		s.dirtyEntry[e] = struct{}{}
	}
}

// desiredVS returns the virtual server key should be, or nil. When two
// service ports claim the same frontend (which API validation normally
// prevents), the first in name order wins, the same way in every sync.
func (s *store) desiredVS(k kipvs.ServiceKey) *vsSpec {
	claims := s.claimVS[k]
	if len(claims) == 0 {
		return nil
	}
	best := claims[0]
	for _, c := range claims[1:] {
		if c.owner.Compare(best.owner) < 0 {
			best = c
		}
	}
	return &best.spec
}
