package ipvs

import (
	"net/netip"
	"slices"

	"github.com/svcproxy/svcproxy/pkg/kipset"
	"github.com/svcproxy/svcproxy/pkg/kipvs"
	"github.com/svcproxy/svcproxy/pkg/pipeline/reconcile"
	"github.com/svcproxy/svcproxy/pkg/proxy"
)

// owner is the service port a part belongs to.
type owner = proxy.ServicePortName

// Phases order a sync's changes so that a bound address never lacks its
// virtual server: virtual servers first, then addresses and set members
// in, then members and addresses out, then virtual servers out.
const (
	phaseVS = iota
	phaseAddrAdd
	phaseEntryAdd
	phaseEntryDel
	phaseAddrDel
	phaseVSDel
)

var (
	vsKind = reconcile.Kind[kipvs.ServiceKey, vsSpec]{Name: "virtual server", Equal: vsSpec.serves,
		AddPhase: phaseVS, UpdatePhase: phaseVS, DeletePhase: phaseVSDel}
	addrKind = reconcile.Kind[netip.Addr, struct{}]{Name: "address", Equal: present,
		AddPhase: phaseAddrAdd, DeletePhase: phaseAddrDel}
	entryKind = reconcile.Kind[kipset.Entry, struct{}]{Name: "ipset member", Equal: present,
		AddPhase: phaseEntryAdd, DeletePhase: phaseEntryDel}
)

func present(struct{}, struct{}) bool { return true }

// store is this family's kernel objects as the reconciliation engine keeps
// them: what the service ports claim, what this Proxier last committed,
// and what a sync touched. Keys stay typed down to the kernel clients.
type store struct {
	syncs reconcile.Syncs
	vs    *reconcile.Table[owner, kipvs.ServiceKey, vsSpec]
	addrs *reconcile.Table[owner, netip.Addr, struct{}]
	// sets holds each ipset's members (by family-specific name), one
	// table a set, so that its kernel side counts them (capacity.go).
	sets map[string]*reconcile.Table[owner, kipset.Entry, struct{}]
}

func newStore(family proxy.IPFamily) *store {
	s := &store{
		vs:    reconcile.NewTable[owner](vsKind),
		addrs: reconcile.NewTable[owner](addrKind),
		sets:  map[string]*reconcile.Table[owner, kipset.Entry, struct{}]{},
	}
	for _, spec := range setSpecs {
		s.sets[setName(family, spec.name)] = reconcile.NewTable[owner](entryKind)
	}
	return s
}

// serves reports whether the kernel's virtual server have is want: the
// same settings, and exactly want's real servers, at weight 1. One with
// real servers draining is looked at again by every diff that touches it,
// so that each is handed to the reaper (applyVS) even after a read-back.
func (want vsSpec) serves(have vsSpec) bool {
	return len(have.idle) == 0 && want.svc == have.svc && sameServers(want.dests, have.dests)
}

// drains reports whether the kernel's virtual server have is want with
// the others of its real servers draining (weight 0): a sync would write
// nothing to it.
func (want vsSpec) drains(have vsSpec) bool {
	for _, w := range have.idle {
		if w != 0 {
			return false
		}
	}
	return want.svc == have.svc && sameServers(want.dests, have.dests)
}

// sameServers reports whether want (render's order) and have (the kernel
// side's, sorted) hold the same real servers.
func sameServers(want, have []netip.AddrPort) bool {
	if len(want) != len(have) {
		return false
	}
	for _, d := range want {
		if !holdsServer(have, d) {
			return false
		}
	}
	return true
}

// holdsServer reports whether sorted holds d.
func holdsServer(sorted []netip.AddrPort, d netip.AddrPort) bool {
	_, ok := slices.BinarySearchFunc(sorted, d, netip.AddrPort.Compare)
	return ok
}

// replace swaps o's claims for p's (p nil: o claims nothing any more).
func (s *store) replace(o owner, p *part) {
	var vs []reconcile.Item[kipvs.ServiceKey, vsSpec]
	var addrs []reconcile.Item[netip.Addr, struct{}]
	members := map[string][]reconcile.Item[kipset.Entry, struct{}]{}
	if p != nil {
		for _, v := range p.vs {
			vs = append(vs, reconcile.Item[kipvs.ServiceKey, vsSpec]{Key: v.svc.ServiceKey, Value: v})
		}
		for _, a := range p.addrs {
			addrs = append(addrs, reconcile.Item[netip.Addr, struct{}]{Key: a})
		}
		for _, e := range p.entries {
			members[e.set] = append(members[e.set], reconcile.Item[kipset.Entry, struct{}]{Key: e.entry})
		}
	}
	s.vs.Replace(o, vs)
	s.addrs.Replace(o, addrs)
	for name, t := range s.sets {
		t.Replace(o, members[name])
	}
}

// each calls f with every table.
func (s *store) each(f func(anyTable)) {
	f(s.vs)
	f(s.addrs)
	for _, t := range s.sets {
		f(t)
	}
}

// anyTable is what the store does to all its tables alike.
type anyTable interface {
	ResetClaims()
	ForgetKernel()
	MarkAllDirty()
}

// resetClaims drops every claim, before a full sync claims everything
// again: every key, claimed or in the kernel, is diffed.
func (s *store) resetClaims() { s.each(anyTable.ResetClaims) }
