package iptables

import (
	"bytes"
	"context"
	"fmt"
	"net/netip"
	"slices"

	"k8s.io/klog/v2"

	"github.com/svcproxy/svcproxy/internal/kiptables"
	"github.com/svcproxy/svcproxy/internal/metrics"
	"github.com/svcproxy/svcproxy/pkg/proxy"
	"github.com/svcproxy/svcproxy/pkg/proxy/desired"
)

// Sync is part of syncer.Proxier. A full sync rewrites every chain we own;
// a partial one (state.Changed non-nil, nothing global changed) rewrites
// the top-level chains and only the changed ports' own chains. Both are a
// single iptables-restore --noflush, atomic per table.
func (p *Proxier) Sync(ctx context.Context, st *desired.State) error {
	if st.Family != p.family {
		return fmt.Errorf("iptables %s proxier got a %s state", p.family, st.Family)
	}
	cfg := newConfig(st, &p.opts, countEndpoints(st) > largeClusterEndpoints)
	// Swap, not Load: a canary loss noticed while this sync runs must
	// survive it.
	full := p.needFull.Swap(false) || st.Changed == nil || p.entries == nil || !cfg.equal(p.cfg)
	err := p.sync(ctx, st, cfg, full)
	if err != nil {
		p.needFull.Store(true)
		if !full {
			metrics.IPTablesPartialRestoreFailuresTotal.WithLabelValues(string(p.family)).Inc()
		}
		return fmt.Errorf("syncing iptables %s (full=%t): %w", p.family, full, err)
	}
	return nil
}

func (p *Proxier) sync(ctx context.Context, st *desired.State, cfg *config, full bool) error {
	if cfg.localhostV4 {
		if err := p.ensureLocalnet(); err != nil {
			return err
		}
	}
	if full {
		if err := p.ensureJumps(ctx); err != nil {
			return err
		}
	}
	pl := p.plan(ctx, st, &renderer{cfg: cfg, probs: &p.probs}, full)
	if err := p.ipt.Restore(ctx, pl.data); err != nil {
		// Our record of the kernel's chains may be off now; the full
		// sync that follows sweeps with iptables-save.
		p.entries, p.natOwned, p.lastSweep = nil, nil, p.opts.Now().Add(-p.opts.SyncPeriod-1)
		return fmt.Errorf("iptables-restore: %w", err)
	}
	p.commit(pl, cfg)
	return nil
}

// ensureJumps creates the canaries and the top-level chains and puts our
// jumps at the front of the built-in chains. Done on full syncs only: the
// rules outlive us, and checking them costs ~20 exec calls.
func (p *Proxier) ensureJumps(ctx context.Context) error {
	for _, t := range canaryTables {
		if err := p.ipt.EnsureChain(ctx, t, chainCanary); err != nil {
			return err
		}
	}
	for _, j := range append(slices.Clone(jumps), kubeletJumps...) {
		if err := p.ipt.EnsureChain(ctx, j.table, j.to); err != nil {
			return err
		}
		if err := p.ipt.EnsureRuleAtFront(ctx, j.table, j.from, j.args()...); err != nil {
			return err
		}
	}
	return nil
}

// plan is one sync's restore input and what it does.
type plan struct {
	data     []byte
	full     bool
	rendered map[string]struct{} // nat chains written
	deleted  []string
	stats    syncStats
}

func (p *Proxier) plan(ctx context.Context, st *desired.State, r *renderer, full bool) *plan {
	pl := &plan{full: full, rendered: map[string]struct{}{}}
	var natChainLines, ownRules lineBuffer
	stale := map[string]struct{}{}
	if full {
		for name := range p.natOwned {
			stale[name] = struct{}{}
		}
		p.entries = make(map[proxy.ServicePortName]*entry, len(st.Services))
		for name, sp := range st.Services {
			p.entries[name] = r.renderService(sp, &natChainLines, &ownRules)
		}
	} else {
		for name := range st.Changed {
			if old := p.entries[name]; old != nil {
				for _, c := range old.chains {
					if _, ok := p.natOwned[c]; ok {
						stale[c] = struct{}{}
					}
				}
				delete(p.entries, name)
			}
			if sp := st.Services[name]; sp != nil {
				p.entries[name] = r.renderService(sp, &natChainLines, &ownRules)
			}
		}
	}
	for name := range st.Changed {
		if e := p.entries[name]; e != nil {
			for _, c := range e.chains {
				pl.rendered[c] = struct{}{}
			}
		}
	}
	if full {
		for _, e := range p.entries {
			for _, c := range e.chains {
				pl.rendered[c] = struct{}{}
				delete(stale, c)
			}
		}
		p.sweep(ctx, r.cfg, stale, pl.rendered)
	} else {
		for c := range pl.rendered {
			delete(stale, c)
		}
	}
	pl.deleted = sortedKeys(stale)
	p.assemble(pl, st, r, &natChainLines, &ownRules)
	return pl
}

// sweep adds to stale the service chains iptables-save shows that we do
// not want, e.g. left by an earlier run. In large-cluster mode, where
// iptables-save takes seconds, it runs at most once per SyncPeriod.
func (p *Proxier) sweep(ctx context.Context, cfg *config, stale, wanted map[string]struct{}) {
	now := p.opts.Now()
	if cfg.largeCluster && now.Sub(p.lastSweep) < p.opts.SyncPeriod {
		return
	}
	save, err := p.ipt.Save(ctx, kiptables.TableNAT)
	if err != nil {
		klog.ErrorS(err, "iptables-save failed; stale chains are not deleted this time", "ipFamily", p.family)
		return
	}
	p.lastSweep = now
	for _, line := range bytes.Split(save, []byte("\n")) {
		if len(line) == 0 || line[0] != ':' {
			continue
		}
		name, _, _ := bytes.Cut(line[1:], []byte(" "))
		if _, ok := wanted[string(name)]; !ok && isServiceChain(string(name)) {
			stale[string(name)] = struct{}{}
		}
	}
}

// assemble writes the restore input: the whole of our filter chains, then
// nat's top-level chains, the (re)rendered ports' chains and the deletions.
// Chain lines come before any rule, as a jump target must exist when the
// rule is read.
func (p *Proxier) assemble(pl *plan, st *desired.State, r *renderer, natChainLines, ownRules *lineBuffer) {
	order := sortedNames(p.entries)
	var filter, nat lineBuffer
	filter.line("*filter")
	for _, c := range r.cfg.filterChains() {
		filter.chainLine(c)
	}
	r.globalFilter(&filter)
	for _, name := range order {
		e := p.entries[name]
		for _, s := range []shared{filterServices, filterExternal, filterNodePorts, filterFirewall} {
			filter.appendBuf(&e.shared[s])
		}
	}
	if r.cfg.rejectPorts {
		r.unknownPortRejects(&filter, clusterIPs(st))
	}
	filter.line("COMMIT")

	nat.line("*nat")
	for _, c := range natChains {
		nat.chainLine(c)
	}
	nat.appendBuf(natChainLines)
	for _, c := range pl.deleted {
		nat.chainLine(c)
	}
	r.globalNAT(&nat)
	for _, name := range order {
		e := p.entries[name]
		nat.appendBuf(&e.shared[natServices])
		nat.appendBuf(&e.shared[natNodePorts])
		pl.stats.natTotal += e.chainRules
	}
	r.nodePortJumps(&nat)
	nat.appendBuf(ownRules)
	for _, c := range pl.deleted {
		nat.line("-X", c)
	}
	nat.line("COMMIT")

	pl.data = append(filter.b, nat.b...)
	// "*table" and "COMMIT" are lines but not rules.
	pl.stats.full = pl.full
	pl.stats.filterRules = filter.lines - 2
	pl.stats.natRules = nat.lines - 2 - len(pl.deleted)
	pl.stats.natTotal += nat.lines - 2 - len(pl.deleted) - ownRules.lines
	pl.stats.deleted = len(pl.deleted)
}

func (p *Proxier) commit(pl *plan, cfg *config) {
	if pl.full || p.natOwned == nil {
		p.natOwned = map[string]struct{}{}
	}
	for c := range pl.rendered {
		p.natOwned[c] = struct{}{}
	}
	for _, c := range pl.deleted {
		delete(p.natOwned, c)
	}
	p.cfg = cfg
	p.last = pl.stats
	fam := string(p.family)
	metrics.IPTablesRulesTotal.WithLabelValues(string(kiptables.TableFilter), fam).Set(float64(pl.stats.filterRules))
	metrics.IPTablesRulesTotal.WithLabelValues(string(kiptables.TableNAT), fam).Set(float64(pl.stats.natTotal))
	metrics.IPTablesRulesLastSync.WithLabelValues(string(kiptables.TableFilter), fam).Set(float64(pl.stats.filterRules))
	metrics.IPTablesRulesLastSync.WithLabelValues(string(kiptables.TableNAT), fam).Set(float64(pl.stats.natRules))
}

// countEndpoints is the number of cluster endpoints over all ports, which
// decides large-cluster mode.
func countEndpoints(st *desired.State) int {
	n := 0
	for _, sp := range st.Services {
		n += len(sp.Cluster.Endpoints)
	}
	return n
}

func sortedNames(m map[proxy.ServicePortName]*entry) []proxy.ServicePortName {
	names := make([]proxy.ServicePortName, 0, len(m))
	for n := range m {
		names = append(names, n)
	}
	slices.SortFunc(names, proxy.ServicePortName.Compare)
	return names
}

func sortedKeys(m map[string]struct{}) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// clusterIPs lists the distinct cluster IPs of the state, sorted.
func clusterIPs(st *desired.State) []netip.Addr {
	ips := make([]netip.Addr, 0, len(st.Services))
	for _, sp := range st.Services {
		ips = append(ips, sp.ClusterIP)
	}
	slices.SortFunc(ips, netip.Addr.Compare)
	return slices.Compact(ips)
}
