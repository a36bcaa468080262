package iptables

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/netip"
	"slices"

	"github.com/svcproxy/svcproxy/pkg/kiptables"
	"github.com/svcproxy/svcproxy/pkg/pipeline/desired"
	"github.com/svcproxy/svcproxy/pkg/pipeline/metrics"
	"github.com/svcproxy/svcproxy/pkg/pipeline/reconcile"
	"github.com/svcproxy/svcproxy/pkg/proxy"
)

// Sync is part of syncer.Proxier. A full sync rewrites every chain we own
// and recreates the canaries and jumps; a partial one rewrites the
// changed ports' own chains, and the top-level chains when they changed.
// Both are a single iptables-restore --noflush, atomic per table. Which
// chains are written and deleted is the reconcile engine's diff (store);
// a recovery sync reads nat's chain names back first.
func (p *Proxier) Sync(ctx context.Context, st *desired.State, mode proxy.SyncMode) error {
	if st.Family != p.family {
		return fmt.Errorf("iptables %s proxier got a %s state", p.family, st.Family)
	}
	plan, err := p.store.syncs.Begin(mode, "iptables "+string(p.family))
	if err != nil {
		return err
	}
	if plan.Full {
		p.counters = p.ensureCounters()
		p.unsettled = nil
	} else {
		st = p.withUnsettled(st)
	}
	cfg := newConfig(st, &p.opts, countEndpoints(st) > largeClusterEndpoints, p.counters)
	if !plan.Full && !cfg.equal(p.cfg) {
		// The syncer makes a change of the State's globals full, and the
		// options are fixed: this is large-cluster mode flipping, which
		// changes the text of every endpoint chain.
		return fmt.Errorf("iptables %s: the rendering of every chain changed: %w", p.family, proxy.ErrFullSyncNeeded)
	}
	if err := p.sync(ctx, st, cfg, plan); err != nil {
		if !plan.Full {
			metrics.IPTablesPartialRestoreFailuresTotal.WithLabelValues(string(p.family)).Inc()
		}
		return fmt.Errorf("syncing iptables %s (full=%t): %w", p.family, plan.Full, err)
	}
	return nil
}

func (p *Proxier) sync(ctx context.Context, st *desired.State, cfg *config, plan reconcile.Plan) error {
	if cfg.localhostV4 {
		if err := p.ensureLocalnet(); err != nil {
			return err
		}
	}
	r := &renderer{cfg: cfg, state: st, probs: &p.probs}
	var in *input
	var err error
	if plan.Full {
		natChains, jerr := p.ensureJumps(ctx)
		if jerr != nil {
			return jerr
		}
		if plan.ReadBack {
			p.readBack(ctx, cfg.largeCluster, natChains)
		}
		// The ports' own chains (~33 MB at 10k services) are rendered as
		// the tool reads them, never held whole.
		err = p.ipt.RestoreFrom(ctx, func(w io.Writer) error {
			var perr error
			if in, perr = p.render(st, r, w); perr != nil {
				return perr
			}
			return writeChunks(w, in.data)
		})
	} else {
		in, _ = p.render(st, r, nil)
		if len(in.data) == 0 {
			// Nothing the kernel holds would change.
			p.commit(in, cfg)
			return nil
		}
		err = p.ipt.Restore(ctx, in.data...)
	}
	if err != nil {
		if !plan.Full && errors.Is(err, kiptables.ErrNothingCommitted) {
			// The kernel and the store's record of it are as the last
			// success left them (the store commits only on success); what
			// went ahead is the changed ports' entries and claims, which
			// the next partial sync renders again.
			p.unsettled = maps.Clone(st.Changed)
			return fmt.Errorf("iptables-restore: %w: %w", proxy.ErrNotApplied, err)
		}
		// Our record of the kernel's chains may be off now; the recovery
		// sync that follows reads them back.
		p.unsettled = nil
		p.store.syncs.Failed()
		p.lastSweep = p.opts.Now().Add(-p.opts.SyncPeriod - 1)
		return fmt.Errorf("iptables-restore: %w", err)
	}
	p.commit(in, cfg)
	p.unsettled = nil
	return nil
}

// withUnsettled is st for a partial sync: its Changed also names the
// ports a refused sync rendered since the last success.
func (p *Proxier) withUnsettled(st *desired.State) *desired.State {
	if len(p.unsettled) == 0 {
		return st
	}
	out := *st
	out.Changed = maps.Clone(p.unsettled)
	maps.Copy(out.Changed, st.Changed)
	return &out
}

// ensureJumps creates the canaries and the top-level chains and puts our
// jumps at the front of the built-in chains. Done on full syncs only: the
// rules outlive us. kiptables.EnsureAtFront reads what is there first
// (one iptables-save per table on iptables-legacy, one listing of all the
// built-in chains on iptables-nft) and adds only what is missing; the nat
// chains an iptables-save lists are returned for the read-back, which
// would read the same.
func (p *Proxier) ensureJumps(ctx context.Context) (natChains []string, err error) {
	tables := make([]kiptables.FrontTable, len(canaryTables))
	for i, t := range canaryTables {
		tables[i] = kiptables.FrontTable{Table: t, Empty: []string{chainCanary}}
		for _, j := range append(slices.Clone(jumps), kubeletJumps...) {
			if j.table == t {
				tables[i].Rules = append(tables[i].Rules, kiptables.FrontRule{Chain: j.from, Rule: j.args()})
			}
		}
	}
	saved, err := kiptables.EnsureAtFront(ctx, p.ipt, tables)
	if err != nil {
		return nil, fmt.Errorf("ensuring the jumps: %w", err)
	}
	return saved[kiptables.TableNAT], nil
}

// input is one sync's restore input and the changes it makes, which are
// committed to the store when the restore succeeds.
type input struct {
	data   [][]byte // chunks, mostly the entries' own lines
	full   bool
	chains chainDiff
	shared []reconcile.Change[sharedText, uint64]
	stats  syncStats
}

// render renders a full sync (stream set) or the changed ports of a
// partial one, claims their chains, and builds the input from the diff. A
// full sync claims every port's chains again and writes the start of the
// nat section and the ports' own chains to stream as it renders them: its
// claims are all new, so the diff's adds and updates are exactly what it
// streamed, and the rest of the input is left in data. A partial sync's
// input is all in data.
func (p *Proxier) render(st *desired.State, r *renderer, stream io.Writer) (*input, error) {
	in := &input{full: stream != nil}
	own := &lineBuffer{} // the (re)rendered ports' own chains
	if in.full {
		// The top-level chains come first: the ports' rules jump to
		// KUBE-MARK-MASQ, which may not exist yet.
		if _, err := io.WriteString(stream, "*nat\n"); err != nil {
			return nil, err
		}
		if _, err := stream.Write(natHead().b); err != nil {
			return nil, err
		}
		own = streamTo(stream)
		p.store.chains.ResetClaims()
		p.store.chains.ReserveOwners(st.Services.Len())
		// A full sync writes the shared chains whatever was written before.
		p.store.shared.ForgetKernel()
		p.entries = make(map[proxy.ServicePortName]*entry, st.Services.Len())
		for name, sp := range st.Services.All() {
			p.entries[name] = r.renderService(sp, own)
			p.store.claimChains(r.owner, r)
		}
		if own.flush(); own.err != nil {
			return nil, own.err
		}
	} else {
		for name := range st.Changed {
			delete(p.entries, name)
			port := ownerOf(namesOf(name)) // a removed port claims nothing
			if sp := st.Service(name); sp != nil {
				p.entries[name] = r.renderService(sp, own)
				port = r.owner
			}
			p.store.claimChains(port, r)
		}
	}
	in.chains = p.store.diffChains()
	p.assemble(in, st, r, own)
	return in, nil
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
func (p *Proxier) assemble(in *input, st *desired.State, r *renderer, own *lineBuffer) {
	order := sortedNames(p.entries)
	filter, top := p.sharedChains(order, st, r)
	in.stats.natTotal += top.lines
	for _, e := range p.entries {
		in.stats.natTotal += e.chainRules
	}
	var write [2]bool
	in.shared, write = p.store.diffShared([2]uint64{natTop: top.sum(p.seed), filterAll: filter.sum(p.seed)})
	withFilter, withTop := write[filterAll], write[natTop]

	var nat chunks
	if !in.full {
		if withTop {
			nat.add(natHead())
		}
		nat.add(own)
	}
	var deletions, removals lineBuffer
	for _, c := range in.chains.deleted {
		deletions.chainLine(c)
		removals.line("-X", c)
	}
	nat.add(&deletions)
	if withTop {
		nat.addChunks(top)
	}
	nat.add(&removals)
	var out chunks
	if in.full || len(nat.parts) > 0 {
		if !in.full {
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
		in.stats.filterRules = filter.lines
	}
	in.data = out.parts
	in.stats.full = in.full
	in.stats.filterTotal = filter.lines
	in.stats.natRules = nat.lines - len(in.chains.deleted)
	if in.full {
		in.stats.natRules += own.lines // streamed, not in nat
	}
	in.stats.deleted = len(in.chains.deleted)
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

// commit records what the restore made: the chains written and deleted,
// the shared texts' hashes, and the metrics.
func (p *Proxier) commit(in *input, cfg *config) {
	p.store.commitChains(in.chains)
	for _, c := range in.shared {
		p.store.shared.Commit(c)
	}
	p.cfg = cfg
	p.last = in.stats
	fam := string(p.family)
	metrics.IPTablesRulesTotal.WithLabelValues(string(kiptables.TableFilter), fam).Set(float64(in.stats.filterTotal))
	metrics.IPTablesRulesTotal.WithLabelValues(string(kiptables.TableNAT), fam).Set(float64(in.stats.natTotal))
	metrics.IPTablesRulesLastSync.WithLabelValues(string(kiptables.TableFilter), fam).Set(float64(in.stats.filterRules))
	metrics.IPTablesRulesLastSync.WithLabelValues(string(kiptables.TableNAT), fam).Set(float64(in.stats.natRules))
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

// clusterIPs lists the distinct cluster IPs of the state, sorted.
func clusterIPs(st *desired.State) []netip.Addr {
	ips := make([]netip.Addr, 0, st.Services.Len())
	for _, sp := range st.Services.All() {
		ips = append(ips, sp.ClusterIP)
	}
	slices.SortFunc(ips, netip.Addr.Compare)
	return slices.Compact(ips)
}
