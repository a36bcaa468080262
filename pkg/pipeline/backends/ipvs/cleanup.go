package ipvs

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/svcproxy/svcproxy/pkg/kipset"
	"github.com/svcproxy/svcproxy/pkg/kiptables"
	"github.com/svcproxy/svcproxy/pkg/kipvs"
)

// Cleanup is part of syncer.Proxier (--cleanup, and the start-up cleanup
// of the other modes): it removes this family's virtual servers that IPVS
// mode made (ownership.go; never those in ExcludeCIDRs), the iptables rules
// and chains, the ipsets and, once no family uses it, kube-ipvs0. It works
// from the kernel's contents, not from memory, so a fresh process can
// clean up after an old one. Order matters: what proves a virtual server
// ours is read first, and the virtual servers go before the sets and the
// link that prove it, so an interrupted cleanup can be resumed; the jumps
// go before the chains, and the chains before the sets they match on.
func (p *Proxier) Cleanup(ctx context.Context) error {
	p.Close()
	p.mu.Lock()
	defer p.mu.Unlock()
	owned, err := p.readOwnership()
	errs := []error{err}
	errs = append(errs, p.cleanupVS(owned))
	errs = append(errs, p.cleanupIptables(ctx))
	errs = append(errs, p.cleanupSets())
	errs = append(errs, p.cleanupLink())
	p.store, p.terminating = newStore(p.family), map[rsKey]time.Time{}
	p.rulesText, p.setsReady, p.capacity = nil, false, map[string]uint32{}
	return errors.Join(errs...)
}

func (p *Proxier) cleanupIptables(ctx context.Context) error {
	var errs []error
	for _, j := range jumps {
		if err := p.c.Iptables.DeleteRule(ctx, j.table, j.chain, j.rule...); err != nil {
			errs = append(errs, fmt.Errorf("deleting jump from %s %s: %w", j.table, j.chain, err))
		}
	}
	present := map[kiptables.Table][]string{}
	for table, chains := range map[kiptables.Table][]string{kiptables.TableNAT: natChains, kiptables.TableFilter: filterChains} {
		for _, c := range chains {
			ok, err := p.c.Iptables.ChainExists(ctx, table, c)
			if err != nil {
				errs = append(errs, err)
			}
			if ok {
				present[table] = append(present[table], c)
			}
		}
	}
	if text := renderIptablesCleanup(present); len(text) > 0 {
		if err := p.c.Iptables.Restore(ctx, text); err != nil {
			errs = append(errs, fmt.Errorf("deleting iptables chains: %w", err))
		}
	}
	return errors.Join(errs...)
}

func (p *Proxier) cleanupSets() error {
	var errs []error
	names := []string{setResizeTmp} // left behind by an interrupted resize
	for _, s := range setSpecs {
		names = append(names, s.name)
	}
	for _, n := range names {
		err := p.c.IPSet.DestroySet(setName(p.family, n))
		if err != nil && !errors.Is(err, kipset.ErrNotFound) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func (p *Proxier) cleanupVS(owned *ownership) error {
	svcs, err := p.c.IPVS.ListServices()
	if err != nil {
		return fmt.Errorf("listing IPVS services: %w", err)
	}
	var errs []error
	for _, svc := range svcs {
		if !p.family.Contains(svc.Addr) || p.excluded(svc.Addr) || !owned.owns(svc.ServiceKey) {
			continue
		}
		if err := p.c.IPVS.DeleteService(svc.ServiceKey); err != nil && !errors.Is(err, kipvs.ErrNotFound) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// cleanupLink removes this family's addresses from kube-ipvs0 and deletes
// the link when nothing is left on it (the other family's proxier may
// still be using it).
func (p *Proxier) cleanupLink() error {
	addrs, err := p.c.Link.ListAddrs(DummyLink)
	if err != nil {
		return nil // no link, nothing to do
	}
	var errs []error
	left := 0
	for _, a := range addrs {
		if !p.family.Contains(a) {
			if !a.IsLinkLocalUnicast() {
				left++
			}
			continue
		}
		if err := p.c.Link.DelAddr(DummyLink, a); err != nil {
			errs = append(errs, err)
		}
	}
	if left == 0 && len(errs) == 0 {
		errs = append(errs, p.c.Link.DeleteLink(DummyLink))
	}
	return errors.Join(errs...)
}
