package iptables

import (
	"context"
	"fmt"
	"io"
	"net/netip"
	"slices"

	"k8s.io/klog/v2"

	"github.com/svcproxy/svcproxy/pkg/kiptables"
	"github.com/svcproxy/svcproxy/pkg/proxy"
	"github.com/svcproxy/svcproxy/pkg/proxy/desired"
	"github.com/svcproxy/svcproxy/pkg/proxy/metrics"
)

// Sync is part of syncer.Proxier. A full sync rewrites every chain we own
// and recreates the canaries and jumps; a partial one rewrites the
// top-level chains and only the changed ports' own chains. Both are a
// single iptables-restore --noflush, atomic per table. A recovery sync is
// a full one: that already checks the kernel (the jumps, the stale-chain
// sweep), and a failed restore has dropped the record it would distrust.
func (p *Proxier) Sync(ctx context.Context, st *desired.State, mode proxy.SyncMode) error {
	if st.Family != p.family {
		return fmt.Errorf("iptables %s proxier got a %s state", p.family, st.Family)
	}
	full := mode.Full()
	if !full && p.entries == nil {
		return fmt.Errorf("iptables %s: no record of the service chains: %w", p.family, proxy.ErrFullSyncNeeded)
	}
	if full {
		p.counters = p.ensureCounters()
	}
	cfg := newConfig(st, &p.opts, countEndpoints(st) > largeClusterEndpoints, p.counters)
	if !full && !cfg.equal(p.cfg) {
		// The syncer makes a change of the State's globals full, and the
		// options are fixed: this is large-cluster mode flipping, which
		// changes the text of every endpoint chain.
		return fmt.Errorf("iptables %s: the rendering of every chain changed: %w", p.family, proxy.ErrFullSyncNeeded)
	}
	err := p.sync(ctx, st, cfg, full)
	if err != nil {
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
	r := &renderer{cfg: cfg, state: st, probs: &p.probs}
	var pl *plan
	var err error
	if full {
		natChains, jerr := p.ensureJumps(ctx)
		if jerr != nil {
			return jerr
		}
		kernel := p.kernelChains(ctx, cfg, natChains)
		// The ports' own chains (~33 MB at 10k services) are rendered as
		// the tool reads them, never held whole.
		err = p.ipt.RestoreFrom(ctx, func(w io.Writer) error {
			var perr error
			if pl, perr = p.plan(st, r, kernel, w); perr != nil {
				return perr
			}
			return writeChunks(w, pl.data)
		})
	} else {
		pl, _ = p.plan(st, r, nil, nil)
		if len(pl.data) == 0 {
			// Nothing the kernel holds would change.
			p.commit(pl, cfg)
			return nil
		}
		err = p.ipt.Restore(ctx, pl.data...)
	}
	if err != nil {
		// Our record of the kernel's chains may be off now; the full
		// sync that follows sweeps with iptables-save.
		p.entries, p.natOwned, p.lastSweep = nil, nil, p.opts.Now().Add(-p.opts.SyncPeriod-1)
		p.written = nil
		return fmt.Errorf("iptables-restore: %w", err)
	}
	p.commit(pl, cfg)
	return nil
}

// ensureJumps creates the canaries and the top-level chains and puts our
// jumps at the front of the built-in chains. Done on full syncs only: the
// rules outlive us. Checking costs one iptables-save per table on
// iptables-legacy (kiptables.EnsureAtFront); the nat chains it lists are
// returned for the stale-chain sweep, which would read the same.
func (p *Proxier) ensureJumps(ctx context.Context) (natChains []string, err error) {
	for _, t := range canaryTables {
		chains := []string{chainCanary}
		var rules []kiptables.FrontRule
		for _, j := range append(slices.Clone(jumps), kubeletJumps...) {
			if j.table == t {
				chains = append(chains, j.to)
				rules = append(rules, kiptables.FrontRule{Chain: j.from, Rule: j.args()})
			}
		}
		saved, err := kiptables.EnsureAtFront(ctx, p.ipt, t, chains, rules)
		if err != nil {
			return nil, fmt.Errorf("ensuring the %s jumps: %w", t, err)
		}
		if t == kiptables.TableNAT {
			natChains = saved
		}
	}
	return natChains, nil
}

// plan is one sync's restore input and what it does.
type plan struct {
	data     [][]byte // chunks, mostly the entries' own lines
	full     bool
	sums     written             // of our filter rules and nat top-level rules, written or not
	rendered map[string]struct{} // nat chains written
	deleted  []string
	stats    syncStats
}

// plan renders a full sync (stream set) or the changed ports of a partial
// one, and what else the input holds. A full sync writes the start of the
// nat section and the ports' own chains to stream as it renders them, and
// the rest of the input is left in data; a partial sync's input is all in
// data. Kernel lists the nat chains found in the kernel for the
// stale-chain sweep (nil: no sweep).
func (p *Proxier) plan(st *desired.State, r *renderer, kernel []string, stream io.Writer) (*plan, error) {
	full := stream != nil
	pl := &plan{full: full, rendered: map[string]struct{}{}}
	own := &lineBuffer{} // the (re)rendered ports' own chains
	stale := map[string]struct{}{}
	if full {
		// The top-level chains come first: the ports' rules jump to
		// KUBE-MARK-MASQ, which may not exist yet.
		if _, err := io.WriteString(stream, "*nat\n"); err != nil {
			return nil, err
		}
		if _, err := stream.Write(natHead().b); err != nil {
			return nil, err
		}
		own = streamTo(stream)
		p.entries = make(map[proxy.ServicePortName]*entry, st.Services.Len())
		for name, sp := range st.Services.All() {
			p.entries[name] = r.renderService(sp, own)
		}
		if own.flush(); own.err != nil {
			return nil, own.err
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
			if sp := st.Service(name); sp != nil {
				p.entries[name] = r.renderService(sp, own)
			}
		}
	}
	p.wantedAndStale(pl, st, kernel, stale)
	pl.deleted = sortedKeys(stale)
	p.assemble(pl, st, r, own)
	return pl, nil
}

// wantedAndStale records in pl.rendered the chains this sync writes and
// drops them from stale. On a full sync every port's chains are written,
// and the chains we wrote before (natOwned) or found in the kernel that no
// port wants become stale: only those are added, not a copy of natOwned's
// 120k names.
func (p *Proxier) wantedAndStale(pl *plan, st *desired.State, kernel []string, stale map[string]struct{}) {
	for name := range st.Changed {
		if e := p.entries[name]; e != nil {
			for _, c := range e.chains {
				pl.rendered[c] = struct{}{}
			}
		}
	}
	if pl.full {
		for _, e := range p.entries {
			for _, c := range e.chains {
				pl.rendered[c] = struct{}{}
			}
		}
		for name := range p.natOwned {
			if _, ok := pl.rendered[name]; !ok {
				stale[name] = struct{}{}
			}
		}
		for _, name := range kernel {
			if _, ok := pl.rendered[name]; !ok {
				stale[name] = struct{}{}
			}
		}
	}
	for c := range pl.rendered {
		delete(stale, c)
	}
}

// kernelChains lists the service chains the kernel holds that our record
// lacks, for the stale-chain sweep: e.g. chains left by an earlier run or
// a failed sync. It takes natChains when
// ensureJumps read them (iptables-legacy), else lists the chain names
// (iptables-save); in large-cluster mode, where that listing may take
// seconds, it does so at most once per SyncPeriod, and returns nil when it
// does not. It runs before the restore, which must not change what it
// reads.
func (p *Proxier) kernelChains(ctx context.Context, cfg *config, natChains []string) []string {
	now := p.opts.Now()
	names := natChains
	if names == nil {
		if cfg.largeCluster && now.Sub(p.lastSweep) < p.opts.SyncPeriod {
			return nil
		}
		var err error
		if names, err = p.ipt.ChainNames(ctx, kiptables.TableNAT); err != nil {
			klog.ErrorS(err, "Listing nat chains failed; stale chains are not deleted this time", "ipFamily", p.family)
			return nil
		}
	}
	p.lastSweep = now
	// Only the service chains our record lacks: those it holds are
	// checked through it (wantedAndStale), and in a running daemon they
	// are nearly all of the 120k names, which the sync would keep alive.
	var unknown []string
	for _, name := range names {
		if _, ok := p.natOwned[name]; !ok && isServiceChain(name) {
			unknown = append(unknown, name)
		}
	}
	return unknown
}

// writeChunks writes data to w.
func writeChunks(w io.Writer, data [][]byte) error {
	for _, d := range data {
		if _, err := w.Write(d); err != nil {
			return err
		}
	}
	return nil
}

// assemble writes the restore input: the nat section — nat's top-level
// chain lines, the (re)rendered ports' own chains, the chain lines of the
// chains to delete (which flush them), the top-level rules and the
// deletions — then the filter section with the whole of our filter
// chains. Every chain is declared before a rule jumps to it, as both
// tools require. nat comes first: each section commits on its own, and
// the small filter section second leaves milliseconds between the two
// commits rather than the seconds a large nat section takes. A partial
// sync leaves out the filter section and the nat top-level chains when
// their text hashes to what the last sync wrote: with 10k services they
// are 20k rules jumping to 20k chains, which iptables-nft-restore takes
// seconds to read (see pkg/kiptables cacheHinter) and which an endpoint
// change rarely alters. The input is a list of chunks pointing at the
// rendered lines, never a copy. On a full sync the start of the nat
// section and own have already been streamed (plan): data holds the rest.
func (p *Proxier) assemble(pl *plan, st *desired.State, r *renderer, own *lineBuffer) {
	order := sortedNames(p.entries)
	filter, top := p.sharedChains(order, st, r)
	pl.stats.natTotal += top.lines
	for _, e := range p.entries {
		pl.stats.natTotal += e.chainRules
	}
	pl.sums = written{filter: filter.sum(p.seed), natTop: top.sum(p.seed)}
	withFilter := pl.full || p.written == nil || pl.sums.filter != p.written.filter
	withTop := pl.full || p.written == nil || pl.sums.natTop != p.written.natTop

	var nat chunks
	if !pl.full {
		if withTop {
			nat.add(natHead())
		}
		nat.add(own)
	}
	var deletions, removals lineBuffer
	for _, c := range pl.deleted {
		deletions.chainLine(c)
		removals.line("-X", c)
	}
	nat.add(&deletions)
	if withTop {
		nat.addChunks(top)
	}
	nat.add(&removals)
	var out chunks
	if pl.full || len(nat.parts) > 0 {
		if !pl.full {
			out.add(&lineBuffer{b: []byte("*nat\n")})
		}
		out.addChunks(&nat)
		out.add(&lineBuffer{b: []byte("COMMIT\n")})
	}
	if withFilter {
		var head lineBuffer
		head.line("*filter")
		for _, c := range r.cfg.filterChains() {
			head.chainLine(c)
		}
		out.add(&head)
		out.addChunks(filter)
		out.add(&lineBuffer{b: []byte("COMMIT\n")})
		pl.stats.filterRules = filter.lines
	}
	pl.data = out.parts
	pl.stats.full = pl.full
	pl.stats.filterTotal = filter.lines
	pl.stats.natRules = nat.lines - len(pl.deleted)
	if pl.full {
		pl.stats.natRules += own.lines // streamed, not in nat
	}
	pl.stats.deleted = len(pl.deleted)
}

// natHead declares nat's top-level chains (flushing them).
func natHead() *lineBuffer {
	var l lineBuffer
	for _, c := range natChains {
		l.chainLine(c)
	}
	return &l
}

// sharedChains gathers the rules of our filter chains and of nat's
// top-level chains: the global ones and each port's, in name order.
func (p *Proxier) sharedChains(order []proxy.ServicePortName, st *desired.State, r *renderer) (filter, top *chunks) {
	filter, top = &chunks{}, &chunks{}
	var globalFilter, rejects, globalNAT, nodePortJumps lineBuffer
	r.globalFilter(&globalFilter)
	filter.add(&globalFilter)
	for _, name := range order {
		e := p.entries[name]
		for _, s := range []shared{filterServices, filterExternal, filterNodePorts, filterFirewall} {
			filter.add(&e.shared[s])
		}
	}
	if r.cfg.rejectPorts {
		r.unknownPortRejects(&rejects, clusterIPs(st))
		filter.add(&rejects)
	}
	r.globalNAT(&globalNAT)
	top.add(&globalNAT)
	for _, name := range order {
		e := p.entries[name]
		top.add(&e.shared[natServices])
		top.add(&e.shared[natNodePorts])
	}
	r.nodePortJumps(&nodePortJumps)
	top.add(&nodePortJumps)
	return filter, top
}

func (p *Proxier) commit(pl *plan, cfg *config) {
	switch {
	case pl.full:
		p.natOwned = pl.rendered // every chain it wrote, none it deleted
	case p.natOwned == nil:
		p.natOwned = map[string]struct{}{}
		fallthrough
	default:
		for c := range pl.rendered {
			p.natOwned[c] = struct{}{}
		}
		for _, c := range pl.deleted {
			delete(p.natOwned, c)
		}
	}
	p.cfg = cfg
	p.last = pl.stats
	sums := pl.sums // not &pl.sums, which would keep the whole input alive
	p.written = &sums
	fam := string(p.family)
	metrics.IPTablesRulesTotal.WithLabelValues(string(kiptables.TableFilter), fam).Set(float64(pl.stats.filterTotal))
	metrics.IPTablesRulesTotal.WithLabelValues(string(kiptables.TableNAT), fam).Set(float64(pl.stats.natTotal))
	metrics.IPTablesRulesLastSync.WithLabelValues(string(kiptables.TableFilter), fam).Set(float64(pl.stats.filterRules))
	metrics.IPTablesRulesLastSync.WithLabelValues(string(kiptables.TableNAT), fam).Set(float64(pl.stats.natRules))
}

// countEndpoints is the number of cluster endpoints over all ports, which
// decides large-cluster mode.
func countEndpoints(st *desired.State) int {
	n := 0
	for _, sp := range st.Services.All() {
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
	ips := make([]netip.Addr, 0, st.Services.Len())
	for _, sp := range st.Services.All() {
		ips = append(ips, sp.ClusterIP)
	}
	slices.SortFunc(ips, netip.Addr.Compare)
	return slices.Compact(ips)
}
