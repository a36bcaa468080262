// Package nftables is the nftables backend: it renders a desired.State into
// the "kube-proxy" table of one IP family and applies only the difference
// from what it committed last. See README.md for the layout.
package nftables

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"os/exec"
	"slices"
	"sync/atomic"

	"k8s.io/klog/v2"
	"sigs.k8s.io/knftables"

	"github.com/svcproxy/svcproxy/internal/metrics"
	"github.com/svcproxy/svcproxy/pkg/proxy"
	"github.com/svcproxy/svcproxy/pkg/proxy/desired"
)

// Proxier programs one IP family's kube-proxy table. It is not safe for
// concurrent use; the syncer calls it from one goroutine.
type Proxier struct {
	family proxy.IPFamily
	nft    knftables.Interface
	run    txRunner // commits a transaction: nft.Run, or nftRunner
	store  *store
	maxOps int
	// ownSlots is config.ownSlots (tests lower it to give every service
	// port with several external frontends chains of its own).
	ownSlots int

	readDone bool  // the existing table was read back
	nlFamily uint8 // non-zero: a real kernel, read back over netlink
	// nlElements: element runs go to the kernel as netlink batches
	// (nlwrite.go) instead of through nft; set from netlinkElements.
	nlElements bool
	needFull   bool // the next sync must reconcile everything
	global     *globalInputs
	last       applyStats

	// programmed is set once a sync succeeded; tableLost is raised by
	// CanaryMissing (another goroutine) and consumed by the next Sync.
	programmed atomic.Bool
	tableLost  atomic.Bool
}

// globalInputs are the State fields every rule may depend on; when they
// change, every shared chain may change, so the sync is full.
type globalInputs struct {
	nodeIPs    []netip.Addr
	nodePorts  desired.NodePortAddrs
	masquerade desired.Masquerade
	// serviceCIDRs are in the cluster-ips-check chain's drop rule.
	serviceCIDRs []netip.Prefix
}

// New returns a Proxier for family that runs the nft binary.
func New(family proxy.IPFamily, o Options) (*Proxier, error) {
	nft, err := knftables.New(specFor(family).family, TableName)
	if err != nil {
		return nil, fmt.Errorf("nftables %s: %w", family, err)
	}
	path, err := exec.LookPath("nft")
	if err != nil {
		return nil, fmt.Errorf("nftables %s: %w", family, err)
	}
	p := NewWithInterface(family, timeoutNFT{nft})
	p.nlFamily = nfproto(family)
	p.nlElements = netlinkElements
	p.run = nftRunner(path)
	return p, nil
}

// NewWithInterface returns a Proxier that programs through nft (tests pass
// knftables.NewFake(family, TableName)).
func NewWithInterface(family proxy.IPFamily, nft knftables.Interface) *Proxier {
	return &Proxier{family: family, nft: nft, run: nft.Run, store: newStore(), maxOps: defaultMaxOps,
		ownSlots: defaultOwnSlots, needFull: true}
}

// Init is part of syncer.Proxier. The nftables backend needs no privileged
// setup beyond what Sync does.
func (p *Proxier) Init(context.Context) error { return nil }

// Sync is part of syncer.Proxier.
func (p *Proxier) Sync(ctx context.Context, st *desired.State) error {
	if st.Family != p.family {
		return fmt.Errorf("nftables %s proxier got a %s state", p.family, st.Family)
	}
	if p.tableLost.Swap(false) {
		// Someone deleted our table: forget what we committed and read
		// the kernel again, so the full sync below recreates everything.
		p.store, p.readDone, p.needFull = newStore(), false, true
	}
	if !p.readDone {
		if err := p.store.readBack(ctx, p.nft, p.nlFamily); err != nil {
			return fmt.Errorf("reading back table %s: %w", TableName, err)
		}
		p.readDone = true
	}
	g := &globalInputs{nodeIPs: st.NodeIPs, nodePorts: st.NodePorts, masquerade: st.Masquerade, serviceCIDRs: st.ServiceCIDRs}
	full := p.needFull || st.Changed == nil || !p.global.equal(g)
	cfg := newConfig(st)
	cfg.kernelValue = p.store
	cfg.ownSlots = p.ownSlots
	p.store.clearDirty()
	if full {
		p.store.resetClaims()
		p.fullClaims(st, cfg)
	} else {
		for name := range st.Changed {
			var pt *part
			if sp := st.Services[name]; sp != nil {
				pt = renderService(cfg, sp)
			}
			p.store.replace(name, pt)
		}
	}
	// Any failure, including one part-way through, makes the next sync
	// full; the store already reflects whatever did commit.
	p.needFull = true
	if cfg.err != nil {
		// Nothing was sent, but the store holds the rendered parts: read
		// the kernel again before the next sync.
		p.store, p.readDone = newStore(), false
		return fmt.Errorf("rendering nftables %s: %w", p.family, cfg.err)
	}
	var ew *nlElemWriter
	if p.nlElements {
		var err error
		if ew, err = newElemWriter(p.nlFamily); err != nil {
			return fmt.Errorf("syncing nftables %s: %w", p.family, err)
		}
		defer ew.close()
	}
	stats, err := apply(ctx, p.nft, p.run, ew, p.store.diff(), p.maxOps)
	p.last = stats
	var cleanup *cleanupError
	if errors.As(err, &cleanup) {
		p.cleanupFailed(cleanup)
		return nil
	}
	if err != nil {
		// The store is true to what this Proxier committed, but the
		// failure may come from a table changed behind its back (an
		// element already gone): read the kernel again before retrying.
		p.store, p.readDone = newStore(), false
		return fmt.Errorf("syncing nftables %s: %w", p.family, err)
	}
	p.store.clearDirty()
	p.needFull = false
	p.global = g
	p.programmed.Store(true)
	return nil
}

// cleanupFailed handles a sync that programmed the State but could not
// delete some stale chains or sets. As upstream, that does not fail the
// sync (nothing refers to them any more); it counts
// kubeproxy_sync_proxy_rules_nftables_cleanup_failures_total and reads the
// kernel back before the next sync, which is full and so retries them.
func (p *Proxier) cleanupFailed(err *cleanupError) {
	klog.ErrorS(err, "nftables cleanup of stale objects failed; will retry", "ipFamily", p.family)
	metrics.NFTablesCleanupFailuresTotal.WithLabelValues(string(p.family)).Inc()
	p.store, p.readDone = newStore(), false
	p.global = nil
	p.programmed.Store(true)
}

// fullClaims renders every part and claims it. Into an empty store (a
// cold start) it renders them all first: that tells how many elements each
// set gets, so a set's entries are allocated once at their final size
// instead of growing (at 50k×10 growth was a seventh of a cold sync's CPU).
// A store that holds the table already (read back at a restart, or an
// hourly resync) has its entries: each part is claimed as soon as it is
// rendered, so that the rendered specs of every Service are never alive
// beside the whole table (≈ 30 MB at 10k×10, at the restart's peak).
func (p *Proxier) fullClaims(st *desired.State, cfg *config) {
	// In name order: the elements are sent in the order they were
	// claimed, so a full sync of the same State sends the same
	// transactions.
	names := slices.SortedFunc(maps.Keys(st.Services), proxy.ServicePortName.Compare)
	global := renderGlobal(st, cfg)
	if p.store.holdsElements() {
		p.store.replace(owner{}, global)
		for _, name := range names {
			p.store.replace(name, renderService(cfg, st.Services[name]))
		}
		return
	}
	parts := make([]*part, len(names))
	for i, name := range names {
		parts[i] = renderService(cfg, st.Services[name])
	}
	p.store.reserve(append(parts, global))
	p.store.replace(owner{}, global)
	for i, name := range names {
		p.store.replace(name, parts[i])
		parts[i] = nil // its element specs are garbage once claimed
	}
}

// Cleanup is part of syncer.Proxier: it deletes this family's table.
func (p *Proxier) Cleanup(ctx context.Context) error {
	p.store, p.readDone, p.needFull, p.global = newStore(), false, true, nil
	return deleteTable(ctx, p.nft)
}

// CleanupTables deletes the kube-proxy table in both families, for other
// modes' start-up cleanup and --cleanup. A missing table is not an error.
func CleanupTables(ctx context.Context) error {
	var errs []error
	for _, f := range proxy.Families {
		nft, err := knftables.New(specFor(f).family, TableName)
		if err != nil {
			errs = append(errs, fmt.Errorf("nftables %s: %w", f, err))
			continue
		}
		if err := deleteTable(ctx, timeoutNFT{nft}); err != nil {
			errs = append(errs, err)
		}
	}
	return errorsJoin(errs)
}

func deleteTable(ctx context.Context, nft knftables.Interface) error {
	tx := nft.NewTransaction()
	tx.Delete(&knftables.Table{})
	if err := nft.Run(ctx, tx); err != nil && !knftables.IsNotFound(err) {
		return fmt.Errorf("deleting table %s: %w", TableName, err)
	}
	return nil
}

func (g *globalInputs) equal(o *globalInputs) bool {
	if g == nil || o == nil {
		return false
	}
	return slices.Equal(g.nodeIPs, o.nodeIPs) &&
		g.nodePorts.Equal(o.nodePorts) &&
		g.masquerade.Mark == o.masquerade.Mark && g.masquerade.All == o.masquerade.All &&
		g.masquerade.Local.Mode == o.masquerade.Local.Mode &&
		g.masquerade.Local.Interface == o.masquerade.Local.Interface &&
		slices.Equal(g.masquerade.Local.CIDRs, o.masquerade.Local.CIDRs) &&
		slices.Equal(g.serviceCIDRs, o.serviceCIDRs)
}
