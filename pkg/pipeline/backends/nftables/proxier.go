// Package nftables is the nftables backend: it renders a desired.State into
// the "kube-proxy" table of one IP family and applies only the difference
// from what it committed last. See README.md for the layout.
package nftables

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync/atomic"

	"k8s.io/klog/v2"

	"github.com/svcproxy/svcproxy/pkg/knft"
	"github.com/svcproxy/svcproxy/pkg/pipeline/desired"
	"github.com/svcproxy/svcproxy/pkg/pipeline/metrics"
	"github.com/svcproxy/svcproxy/pkg/pipeline/reconcile"
	"github.com/svcproxy/svcproxy/pkg/proxy"
)

// Proxier programs one IP family's kube-proxy table. It is not safe for
// concurrent use; the syncer calls it from one goroutine.
type Proxier struct {
	family proxy.IPFamily
	kernel knft.Interface
	store  *store
	maxOps int
	// ownSlots is config.ownSlots (tests lower it to give every service
	// port with several external frontends chains of its own).
	ownSlots int

	// syncs plans each sync (reconcile.Syncs): whether the table must be
	// read back first, and whether to claim everything again.
	syncs reconcile.Syncs
	last  knft.Stats

	// programmed is set once a sync succeeded, for CanaryMissing (which
	// may run on another goroutine).
	programmed atomic.Bool
}

// New returns a Proxier for family that programs the kernel (knft.New).
func New(family proxy.IPFamily, o Options) (*Proxier, error) {
	k, err := knft.New(specFor(family).family, TableName)
	if err != nil {
		return nil, err
	}
	p := NewWithInterface(family, k)
	return p, nil
}

// NewWithInterface returns a Proxier that programs through k (tests pass
// knft.NewFake over knftables.NewFake(family, TableName)).
func NewWithInterface(family proxy.IPFamily, k knft.Interface) *Proxier {
	return &Proxier{family: family, kernel: k, store: newStore(), maxOps: defaultMaxOps,
		ownSlots: defaultOwnSlots}
}

// Init is part of syncer.Proxier. The nftables backend needs no privileged
// setup beyond what Sync does.
func (p *Proxier) Init(context.Context) error { return nil }

// Sync is part of syncer.Proxier. A RecoverySync forgets what this Proxier
// committed and reads the table back first (at start; after a failure;
// after someone deleted the table), so that the full sync recreates
// whatever is missing. A full sync renders every part, a partial one only
// the ports in st.Changed; either sends only the difference.
func (p *Proxier) Sync(ctx context.Context, st *desired.State, mode proxy.SyncMode) error {
	if st.Family != p.family {
		return fmt.Errorf("nftables %s proxier got a %s state", p.family, st.Family)
	}
	plan, err := p.syncs.Begin(mode, fmt.Sprintf("nftables %s", p.family))
	if err != nil {
		// The store was dropped after a failure: there is nothing to
		// apply a difference to.
		return err
	}
	if plan.ReadBack {
		if err := p.ReadBack(ctx); err != nil {
			return err
		}
	}
	full := plan.Full
	cfg := newConfig(st)
	cfg.ownSlots = p.ownSlots
	p.store.clearDirty()
	if full {
		p.store.resetClaims()
		p.fullClaims(st, cfg)
	} else {
		for name := range st.Changed {
			p.renderClaim(cfg, name, st.Service(name))
		}
	}
	// After any failure, including one part-way through, the syncer's
	// next sync is a recovery; the store already reflects whatever did
	// commit.
	if cfg.err != nil {
		// Nothing was sent, but the store holds the rendered parts: read
		// the kernel again before the next sync.
		p.forget()
		return fmt.Errorf("rendering nftables %s: %w", p.family, cfg.err)
	}
	stats, err := apply(ctx, p.kernel, p.store.diff(), p.maxOps)
	p.last = stats
	var cleanup *cleanupError
	if errors.As(err, &cleanup) {
		return p.cleanupFailed(cleanup)
	}
	if err != nil {
		// The store is true to what this Proxier committed, but the
		// failure may come from a table changed behind its back (an
		// element already gone): read the kernel again before retrying.
		p.forget()
		return fmt.Errorf("syncing nftables %s: %w", p.family, err)
	}
	logReplaced(p.family, p.store.replacing)
	p.store.clearDirty()
	p.programmed.Store(true)
	return nil
}

// forget drops the store: the next sync reads the table back first.
func (p *Proxier) forget() {
	p.store = newStore()
	p.syncs.Failed()
}

// ReadBack is syncer.Preparer: it forgets what this Proxier committed and
// reads the table back, the first step of a RecoverySync, so that the
// syncer can do it while the initial lists arrive and make the first sync a
// FullSync.
func (p *Proxier) ReadBack(ctx context.Context) error {
	p.forget()
	if err := p.store.readBack(ctx, p.kernel, p.family); err != nil {
		return fmt.Errorf("reading back table %s: %w", TableName, err)
	}
	logLayout(p.family, p.store)
	p.syncs.ReadDone()
	return nil
}

// HoldsRules is syncer.RulesHolder: whether the last read-back found
// elements in the table (a restart rather than a cold start).
func (p *Proxier) HoldsRules() bool { return p.syncs.Read() && p.store.holdsElements() }

// cleanupFailed handles a sync that programmed the State but could not
// delete some stale chains or sets. As upstream, that does not fail the
// sync (nothing refers to them any more); it counts
// kubeproxy_sync_proxy_rules_nftables_cleanup_failures_total and reports
// proxy.ErrStateLost, so that the next sync is a recovery sync: it reads
// the kernel back and so retries them.
func (p *Proxier) cleanupFailed(err *cleanupError) error {
	klog.ErrorS(err, "nftables cleanup of stale objects failed; will retry", "ipFamily", p.family)
	metrics.NFTablesCleanupFailuresTotal.WithLabelValues(string(p.family)).Inc()
	p.forget()
	p.programmed.Store(true)
	return fmt.Errorf("nftables %s: %w: %w", p.family, err, proxy.ErrStateLost)
}

// fullClaims renders every part (renderAhead: on a goroutine of its own)
// and claims each as soon as it is rendered, so that the rendered specs of
// every Service are never alive at once (≈ 11 MB at 10k × 10; at most
// renderAheadParts wait). Into an empty store (a cold start) the first
// sixteenth of the parts, in name order, tells how many elements the whole
// will claim (service ports spread over the shards by the hash of their
// name), and the element tables are grown for that once instead of step
// by step as the rest comes.
func (p *Proxier) fullClaims(st *desired.State, cfg *config) {
	// In name order: the elements are sent in the order they were
	// claimed, so a full sync of the same State sends the same
	// transactions.
	names := slices.AppendSeq(make([]proxy.ServicePortName, 0, st.Services.Len()), st.Services.Keys())
	slices.SortFunc(names, proxy.ServicePortName.Compare)
	p.store.reserveOwners(len(names) + 1)
	sample := 0
	if !p.store.holdsElements() && len(names) >= minSizingSample*16 {
		sample = len(names) / 16
	}
	p.store.replace(owner{}, renderGlobal(st, cfg))
	parts, recycle := renderAhead(cfg, st, names)
	for i, name := range names {
		if i == sample && sample > 0 {
			p.store.growLike(i, len(names))
		}
		pt := p.store.assignSlots(<-parts)
		var elems []elemSpec
		if pt != nil {
			elems = pt.elems
		}
		p.store.replace(name, pt)
		select {
		case recycle <- elems:
		default:
		}
	}
}

// renderAhead renders the parts of names, in their order, on a goroutine
// of its own, while the caller claims each one as it comes: render is a
// pure function of the State (cfg is the goroutine's alone until the last
// part is taken, which orders its cfg.err before the caller's read), the
// claims change the store and stay on the caller's goroutine. On two CPUs
// a cold start's render (about half as long as its claims) then runs
// beside them instead of before. Element lists the caller is done with
// come back through recycle, for renderService to reuse. The goroutine
// sends exactly one part (nil: the port is gone) per name, then ends.
func renderAhead(cfg *config, st *desired.State, names []proxy.ServicePortName) (<-chan *part, chan<- []elemSpec) {
	parts := make(chan *part, renderAheadParts)
	recycle := make(chan []elemSpec, renderAheadParts)
	go func() {
		for _, name := range names {
			select {
			case elems := <-recycle:
				cfg.scratch.recycle(elems)
			default:
			}
			var pt *part
			if sp := st.Service(name); sp != nil {
				pt = renderService(cfg, sp)
			}
			parts <- pt
		}
	}()
	return parts, recycle
}

// renderAheadParts is how many rendered parts may wait for their claims:
// enough to ride over a claim that takes longer (a collection), few enough
// to stay a few hundred kilobytes.
const renderAheadParts = 64

// minSizingSample is the fewest parts fullClaims sizes the element tables
// from: a smaller store grows cheaply enough.
const minSizingSample = 64

// renderClaim renders sp (nil: gone) and replaces name's claims with its
// part's, and recycles the part's element list.
func (p *Proxier) renderClaim(cfg *config, name owner, sp *desired.ServicePort) {
	if sp == nil {
		p.store.replace(name, nil)
		return
	}
	pt := p.store.assignSlots(renderService(cfg, sp))
	elems := pt.elems
	p.store.replace(name, pt)
	cfg.scratch.recycle(elems)
}

// Close releases the kernel interface's sockets (the daemon calls it on
// its way out).
func (p *Proxier) Close() { p.kernel.Close() }

// Cleanup is part of syncer.Proxier: it deletes this family's table.
func (p *Proxier) Cleanup(ctx context.Context) error {
	p.forget()
	return p.kernel.Delete(ctx)
}

// CleanupTables deletes the kube-proxy table in both families, for other
// modes' start-up cleanup and --cleanup. A missing table is not an error.
func CleanupTables(ctx context.Context) error {
	var errs []error
	for _, f := range proxy.Families {
		errs = append(errs, CleanupTable(ctx, f))
	}
	return errorsJoin(errs)
}

// CleanupTable deletes family's kube-proxy table, for a mode that serves
// that family without nftables (ebpf mode with its tc programs). A missing
// table is not an error. Whether it exists is asked over netlink first, so
// that a node with nothing to clean runs no nft (knft.New alone runs it);
// if netlink cannot tell, nft decides as before.
func CleanupTable(ctx context.Context, family proxy.IPFamily) error {
	present, err := knft.TableExists(specFor(family).family, TableName)
	if err == nil && !present {
		return nil
	}
	k, err := knft.New(specFor(family).family, TableName)
	if err == nil {
		err = k.Delete(ctx)
	}
	if err != nil {
		return fmt.Errorf("nftables %s: %w", family, err)
	}
	return nil
}
