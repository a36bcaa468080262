package backends

import (
	"context"
	"errors"
	"time"

	"k8s.io/klog/v2"

	"github.com/svcproxy/svcproxy/pkg/pipeline/backends/ebpf"
	"github.com/svcproxy/svcproxy/pkg/pipeline/backends/ebpf/nodeport"
	"github.com/svcproxy/svcproxy/pkg/pipeline/desired"
	"github.com/svcproxy/svcproxy/pkg/pipeline/syncer"
	"github.com/svcproxy/svcproxy/pkg/proxy"
)

// hooksAndRules is one family of ebpf mode: the socket hooks and either
// the tc programs or the nftables rules (tcServes), given every sync the
// same State. A failure of any is the sync's failure (the syncer then
// recovers them all); all are tried, so that one half's trouble does not
// leave the other stale.
type hooksAndRules struct {
	family proxy.IPFamily
	hooks  *ebpf.Proxier
	// rules, held and prep are the nftables half, nil when the tc
	// programs serve the family.
	rules syncer.Proxier
	held  syncer.PortHolder
	// prep is the nftables half's read-back ahead of the first sync.
	prep syncer.Preparer
	// served is when the last Sync's hooks half ended (ServedAt).
	served time.Time
	// tc, when --bpf-tc-interfaces is set (one Proxier shared by both
	// families' halves), translates the family's packets from outside the
	// node before netfilter sees them; the hooks serve the node's and its
	// pods' sockets.
	tc *nodeport.Proxier
	// expected tells the size the first State is expected to have
	// (ExpectSize).
	expected func(context.Context) (proxy.ExpectedSize, bool)
	// retire is what the other packet path left, removed after the first
	// sync that succeeds.
	retire retirement
}

// retirement is the other packet path's objects: the nftables table a
// start without the tc programs left, or the tc programs a start with
// them left. They serve until this start's path is programmed, so a
// restart that turns the tc programs on or off leaves no window without
// either.
type retirement struct {
	what   string
	remove func(ctx context.Context) error
	// then is what is retired next, once this is removed.
	then *retirement
	// every is how long a remove that found its objects still needed
	// (errStillNeeded) waits before the next try; next is when that is.
	every time.Duration
	next  time.Time
}

// HeldPorts is the nftables half's answer. After a restart whose first
// sync the kernel rejects, the search for the offending ports starts by
// programming the held ports in both halves: a port the rules hold as the
// State wants it is then served by the hooks too (their maps are written
// for it, or already hold it) and stays served while the search tries the
// others. Without an answer (no nftables half) the search starts from no
// port at all.
func (b *hooksAndRules) HeldPorts(ctx context.Context, st *desired.State) (map[proxy.ServicePortName]struct{}, error) {
	if b.held == nil {
		return nil, nil
	}
	return b.held.HeldPorts(ctx, st)
}

// ReadBack is syncer.Preparer: both halves prepare their first sync at
// once, the hooks loading and attaching their programs and reading their
// maps back (ebpf.Proxier.Prepare), the nftables half reading its tables
// back. A failure of either makes the first sync a recovery sync, which
// does it again.
func (b *hooksAndRules) ReadBack(ctx context.Context) error {
	done := make(chan error, 1)
	go func() {
		err := b.hooks.Prepare(ctx)
		// The hooks asked for the same size when they created maps.
		b.expectTC(ctx)
		done <- err
	}()
	var err error
	if b.prep != nil {
		err = b.prep.ReadBack(ctx)
	}
	return errors.Join(<-done, err)
}

// ExpectSize is syncer.Sizer: the hooks and the tc programs create their
// maps at the expected size; the nftables half has nothing sized.
func (b *hooksAndRules) ExpectSize(expected func(context.Context) (proxy.ExpectedSize, bool)) {
	b.hooks.ExpectSize(expected)
	b.expected = expected
}

// expectTC hands the tc programs the family's expected size when they
// will create their maps: the family that syncs first creates both
// families' (nodeport.Proxier.ExpectSize).
func (b *hooksAndRules) expectTC(ctx context.Context) {
	if b.tc == nil || b.expected == nil || !b.tc.CreatesMaps() {
		return
	}
	if size, ok := b.expected(ctx); ok {
		b.tc.ExpectSize(b.family, size)
	}
}

func (b *hooksAndRules) Init(ctx context.Context) error {
	var rules error
	if b.rules != nil {
		rules = b.rules.Init(ctx)
	}
	return errors.Join(b.hooks.Init(ctx), rules)
}

func (b *hooksAndRules) Sync(ctx context.Context, st *desired.State, mode proxy.SyncMode) error {
	var tc error
	if b.tc != nil {
		tc = b.tc.Sync(ctx, st, mode)
	}
	var err error
	b.served, err = syncBoth(ctx, st, mode, b.hooks, b.rules)
	if err = errors.Join(tc, err); err == nil {
		b.retireOld(ctx, st.Family)
	}
	return err
}

// retireOld removes what the other packet path left, once. A failure is
// logged and tried again after the next sync: this path serves already,
// so it does not fail the sync.
func (b *hooksAndRules) retireOld(ctx context.Context, family proxy.IPFamily) {
	logger := klog.FromContext(ctx)
	for b.retire.remove != nil && !time.Now().Before(b.retire.next) {
		err := b.retire.remove(ctx)
		switch {
		case errors.Is(err, errStillNeeded):
			logger.V(2).Info("The other packet path's leftovers still serve; looking again later", "ipFamily", family, "what", b.retire.what, "reason", err, "after", b.retire.every)
			b.retire.next = time.Now().Add(b.retire.every)
			return
		case err != nil:
			logger.Error(err, "Removing the other packet path's leftovers failed; trying again after the next sync", "ipFamily", family, "what", b.retire.what)
			return
		}
		logger.V(2).Info("Removed the other packet path's leftovers, if any", "ipFamily", family, "what", b.retire.what)
		if next := b.retire.then; next != nil {
			b.retire = *next
		} else {
			b.retire = retirement{}
		}
	}
}

// ServedAt is when the last Sync's hooks half ended, zero when it failed:
// from then on a connect from the cgroup met the State's maps, while the
// nftables half may still have been programming (syncer.EarlyServer).
func (b *hooksAndRules) ServedAt() time.Time { return b.served }

// syncBoth syncs the hooks and the rules (nil: none) at once and joins
// their errors; it returns when the hooks half ended, zero when it
// failed. They share only the State, which neither changes, and neither
// needs the other's result: a translated connection never meets a Service
// rule, and the rules serve what the hooks cannot see. So on a node with
// more than one CPU a sync takes the longer half, not the sum of both.
func syncBoth(ctx context.Context, st *desired.State, mode proxy.SyncMode, hooks, rules syncer.Proxier) (time.Time, error) {
	type result struct {
		at  time.Time
		err error
	}
	done := make(chan result, 1)
	go func() {
		err := hooks.Sync(ctx, st, mode)
		r := result{err: err}
		if err == nil {
			r.at = time.Now()
		}
		done <- r
	}()
	var rulesErr error
	if rules != nil {
		rulesErr = rules.Sync(ctx, st, mode)
	}
	r := <-done
	return r.at, errors.Join(r.err, rulesErr)
}

// CanaryMissing: a pin gone (the hooks' or the tc programs') or, with an
// nftables half, its canary gone.
func (b *hooksAndRules) CanaryMissing(ctx context.Context) (bool, error) {
	if b.tc != nil && b.tc.CanaryMissing() {
		return true, nil
	}
	missing, err := b.hooks.CanaryMissing(ctx)
	if err != nil || missing || b.rules == nil {
		return missing, err
	}
	return b.rules.CanaryMissing(ctx)
}

func (b *hooksAndRules) Cleanup(ctx context.Context) error {
	var tc, rules error
	if b.tc != nil {
		tc = b.tc.Cleanup()
	}
	if b.rules != nil {
		rules = b.rules.Cleanup(ctx)
	}
	return errors.Join(tc, b.hooks.Cleanup(ctx), rules)
}
