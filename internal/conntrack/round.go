package conntrack

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"time"

	"k8s.io/klog/v2"

	"github.com/svcproxy/svcproxy/internal/metrics"
	"github.com/svcproxy/svcproxy/pkg/kconntrack"
	"github.com/svcproxy/svcproxy/pkg/pipeline/desired"
	"github.com/svcproxy/svcproxy/pkg/proxy"
)

// Reconcile runs one round if one is due: list the family's flows once,
// pick the stale ones against the latest State, delete them in chunks
// within the round budget. Run calls it; tests call it directly.
func (r *Reconciler) Reconcile(ctx context.Context) (Result, error) {
	w := r.take()
	if w == nil {
		return Result{Complete: true}, nil
	}
	start := time.Now()
	res, err := r.round(ctx, w)
	r.opts.Report(res, time.Since(start))
	if err != nil || !res.Complete {
		r.giveBack(w)
	}
	if res.Stale > 0 || err != nil {
		klog.V(2).InfoS("Conntrack reconciliation", "table", r.opts.Table, "ipFamily", r.family, "listed", res.Listed,
			"stale", res.Stale, "deleted", res.Deleted, "complete", res.Complete, "elapsed", time.Since(start), "err", err)
	}
	return res, err
}

// conntrackMetrics reports rounds over conntrack in kube-proxy's metrics.
func conntrackMetrics(family proxy.IPFamily) func(Result, time.Duration) {
	label := string(family)
	return func(res Result, elapsed time.Duration) {
		metrics.ReconcileConntrackFlowsLatency.WithLabelValues(label).Observe(elapsed.Seconds())
		metrics.ReconcileConntrackFlowsDeletedEntriesTotal.WithLabelValues(label).Add(float64(res.Deleted))
	}
}

func (r *Reconciler) round(ctx context.Context, w *work) (Result, error) {
	res := Result{Ran: true}
	ix := buildIndex(w.state, w.allRetired())
	ix.sweep = w.sweep
	var stale []kconntrack.Flow
	err := r.ct.List(ctx, r.family, func(f kconntrack.Flow) {
		res.Listed++
		if ix.stale(f) {
			stale = append(stale, f)
		}
	})
	partial := errors.Is(err, kconntrack.ErrInterrupted)
	if err != nil && !partial {
		return res, fmt.Errorf("listing %s conntrack flows: %w", r.family, err)
	}
	stale = r.spareNowValid(w.state, stale)
	res.Stale = len(stale)
	res.Deleted, res.Complete, err = r.deleteBounded(ctx, stale)
	// An interrupted dump may have missed flows: go again.
	res.Complete = res.Complete && !partial
	return res, err
}

// spareNowValid drops flows that a State newer than the round's one makes
// valid: a sync may have added an endpoint while the dump ran, and its new
// flows must not be cut.
func (r *Reconciler) spareNowValid(decided *desired.State, stale []kconntrack.Flow) []kconntrack.Flow {
	latest := r.current()
	if latest == decided || len(stale) == 0 {
		return stale
	}
	ix := buildIndex(latest, nil)
	kept := stale[:0]
	for _, f := range stale {
		if !ix.valid(f) {
			kept = append(kept, f)
		}
	}
	return kept
}

// deleteBounded deletes flows a chunk at a time, yielding between chunks
// so the sync loop is never starved, and stops when the budget is spent.
func (r *Reconciler) deleteBounded(ctx context.Context, flows []kconntrack.Flow) (deleted int, complete bool, err error) {
	deadline := time.Now().Add(r.opts.RoundBudget)
	for len(flows) > 0 {
		n := min(r.opts.Chunk, len(flows))
		gone, err := r.ct.Delete(ctx, r.family, flows[:n])
		deleted += gone
		if err != nil {
			return deleted, false, fmt.Errorf("deleting %s conntrack flows: %w", r.family, err)
		}
		flows = flows[n:]
		if len(flows) > 0 && time.Now().After(deadline) {
			return deleted, false, nil
		}
		runtime.Gosched()
	}
	return deleted, true, nil
}

// allRetired lists the retired ports, expanding whole retired States into
// the ports the current State no longer has in the same shape.
func (w *work) allRetired() []*desired.ServicePort {
	out := w.retired
	for _, old := range w.retiredStates {
		for name, sp := range old.Services.All() {
			if connectionless(sp.Protocol) && w.state.Service(name) != sp {
				out = append(out, sp)
			}
		}
	}
	return out
}
