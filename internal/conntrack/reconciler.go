// Package conntrack removes stale UDP and SCTP conntrack flows to services:
// flows whose original destination is a service frontend and whose reply
// comes from something that no longer serves it. Without this, a UDP client
// that keeps sending (DNS, statsd, QUIC) stays pinned to a dead pod, or to
// the REJECT a service got while it had no endpoints, for as long as it
// keeps the flow alive. Of TCP it removes only connection attempts to a
// served frontend that no rule translated and nothing answered (made while
// the node had no rules), which would otherwise catch a client's next
// connection from the same port.
//
// The Reconciler is level-triggered: every round compares the kernel's
// flows with the latest committed State, not with a diff of events, so a
// missed event or a restart cannot leave a black hole, and a restart with
// unchanged state deletes nothing. It runs beside the sync loop, never on
// it: Observe only records, Run does the work, bounded per round.
package conntrack

import (
	"context"
	"sync"
	"time"

	"k8s.io/klog/v2"

	"github.com/svcproxy/svcproxy/pkg/kconntrack"
	"github.com/svcproxy/svcproxy/pkg/pipeline/desired"
	"github.com/svcproxy/svcproxy/pkg/pipeline/model"
	"github.com/svcproxy/svcproxy/pkg/proxy"
)

// Options tune a Reconciler; zero values pick the defaults.
type Options struct {
	// Chunk is how many flows one Delete call gets; between chunks the
	// round checks its budget and yields.
	Chunk int
	// RoundBudget bounds the deleting part of a round; what is left goes to
	// the next round, which starts at once with a fresh listing.
	RoundBudget time.Duration
	// Resync runs a round this long after the last one even without a
	// trigger, as a safety net; negative disables it.
	Resync time.Duration
	// RetryAfter paces rounds after a failed one; it doubles with each
	// further consecutive failure, up to MaxRetryAfter.
	RetryAfter time.Duration
	// Table names, in logs, what the flows are; empty means conntrack.
	Table string
	// Report, if set, gets each round's result and duration instead of
	// the conntrack reconciler's metrics: a table other than conntrack
	// counts what it removes in metrics of its own.
	Report func(Result, time.Duration)
}

// Defaults of Options.
const (
	DefaultChunk       = 2048
	DefaultRoundBudget = time.Second
	DefaultResync      = 5 * time.Minute
	DefaultRetryAfter  = time.Second
)

// MaxRetryAfter caps the backoff of failed rounds (unless RetryAfter is
// longer): every round dumps all the family's flows (the listing is most
// of a round's time), which a conntrack netlink
// that keeps failing should not cost every second.
const MaxRetryAfter = 30 * time.Second

func (o Options) withDefaults() Options {
	if o.Chunk <= 0 {
		o.Chunk = DefaultChunk
	}
	if o.RoundBudget <= 0 {
		o.RoundBudget = DefaultRoundBudget
	}
	if o.Resync == 0 {
		o.Resync = DefaultResync
	}
	if o.RetryAfter <= 0 {
		o.RetryAfter = DefaultRetryAfter
	}
	if o.Table == "" {
		o.Table = "conntrack"
	}
	return o
}

// Reconciler deletes stale flows of one IP family. The flows come from
// conntrack, or from another table of connections with an original
// destination and a reply source (ebpf mode's translated sockets), to which
// the same rule applies.
type Reconciler struct {
	family proxy.IPFamily
	ct     kconntrack.Interface
	opts   Options
	wake   chan struct{}
	// failures counts consecutive failed rounds; owned by Run's goroutine.
	failures int

	mu      sync.Mutex
	latest  *desired.State
	pending bool // a round is due
	// retired are service ports of earlier States that are gone or changed;
	// retiredStates are whole earlier States replaced by a full sync (whose
	// diff is left to the round, off the sync path).
	retired       []*desired.ServicePort
	retiredStates []*desired.State
	// sweep replaces retired and retiredStates once they grew past their
	// bounds (rounds kept failing while syncs went on): the detail is
	// dropped and the next complete round sweeps more broadly instead.
	sweep bool
}

// Bounds of the retired work kept between rounds. A round normally takes
// it within seconds; they are reached only when rounds keep failing (the
// conntrack netlink dump erroring) across many syncs. A retired State can
// hold as much memory as the current one, hence the small bound.
const (
	maxRetiredPorts  = 4096
	maxRetiredStates = 4
)

// New returns a Reconciler for family that works through ct. The first
// round, once a State has been observed, checks every UDP and SCTP flow.
func New(family proxy.IPFamily, ct kconntrack.Interface, opts Options) *Reconciler {
	opts = opts.withDefaults()
	if opts.Report == nil {
		opts.Report = conntrackMetrics(family)
	}
	return &Reconciler{
		family:  family,
		ct:      ct,
		opts:    opts,
		wake:    make(chan struct{}, 1),
		pending: true,
	}
}

// Observe records the State just programmed and whether it may have made
// flows stale. It never blocks and coalesces: Run sees only the latest
// State. It fits syncer.Options.AfterSync.
func (r *Reconciler) Observe(state *desired.State, changes model.Changes) {
	if state == nil {
		return
	}
	r.mu.Lock()
	prev := r.latest
	r.latest = state
	if prev != nil {
		if state.Changed == nil {
			r.retiredStates = append(r.retiredStates, prev)
		} else {
			r.noteRetired(prev, state)
		}
		r.bound()
	}
	due := changes.ConntrackCleanup || r.pending
	r.pending = due
	r.mu.Unlock()
	if due {
		r.signal()
	}
}

// noteRetired remembers the old version of every changed UDP or SCTP port,
// so flows to frontends it no longer has are found. O(changes).
func (r *Reconciler) noteRetired(prev, state *desired.State) {
	for name := range state.Changed {
		if !connectionless(name.Protocol) {
			continue
		}
		if old := prev.Service(name); old != nil && state.Service(name) != old {
			r.retired = append(r.retired, old)
		}
	}
}

// bound collapses the retired work into a sweep once it is too large.
// Dropping detail must not lose a deletion: the sweep deletes every flow
// a retired frontend could have left behind, and more.
func (r *Reconciler) bound() {
	if len(r.retired) <= maxRetiredPorts && len(r.retiredStates) <= maxRetiredStates {
		return
	}
	if !r.sweep {
		klog.InfoS("Conntrack cleanup is far behind; the next round sweeps every DNATed flow to a non-service address",
			"ipFamily", r.family, "retiredPorts", len(r.retired), "retiredStates", len(r.retiredStates))
	}
	r.retired, r.retiredStates, r.sweep = nil, nil, true
}

func (r *Reconciler) signal() {
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

// work is what one round reconciles against.
type work struct {
	state         *desired.State
	retired       []*desired.ServicePort
	retiredStates []*desired.State
	sweep         bool
}

// take hands the due work to a round, or nil when nothing is due.
func (r *Reconciler) take() *work {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.pending || r.latest == nil {
		return nil
	}
	w := &work{state: r.latest, retired: r.retired, retiredStates: r.retiredStates, sweep: r.sweep}
	r.pending, r.retired, r.retiredStates, r.sweep = false, nil, nil, false
	return w
}

// giveBack returns unfinished work so the next round covers it again.
func (r *Reconciler) giveBack(w *work) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.pending = true
	r.retired = append(w.retired, r.retired...)
	r.retiredStates = append(w.retiredStates, r.retiredStates...)
	r.sweep = r.sweep || w.sweep
	r.bound()
}

func (r *Reconciler) current() *desired.State {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.latest
}

// Run reconciles until ctx is done: whenever Observe says so, after a
// failed or unfinished round, and every Resync.
func (r *Reconciler) Run(ctx context.Context) {
	var resync <-chan time.Time
	var timer *time.Timer
	if r.opts.Resync > 0 {
		timer = time.NewTimer(r.opts.Resync)
		defer timer.Stop()
		resync = timer.C
	}
	for {
		select {
		case <-ctx.Done():
			return
		case <-r.wake:
		case <-resync:
			r.mu.Lock()
			r.pending = true
			r.mu.Unlock()
		}
		for r.roundDue(ctx) {
		}
		if timer != nil {
			timer.Reset(r.opts.Resync)
		}
	}
}

// roundDue runs one round if one is due and reports whether another one
// should follow at once.
func (r *Reconciler) roundDue(ctx context.Context) bool {
	res, err := r.Reconcile(ctx)
	switch {
	case ctx.Err() != nil:
		return false
	case err != nil:
		r.failures++
		wait := r.retryWait()
		klog.ErrorS(err, "Conntrack reconciliation failed; will retry", "table", r.opts.Table, "ipFamily", r.family,
			"consecutiveFailures", r.failures, "after", wait)
		select {
		case <-ctx.Done():
			return false
		case <-time.After(wait):
		}
		return true
	}
	r.failures = 0
	return !res.Complete
}

// retryWait is the pause after the r.failures-th consecutive failed round.
func (r *Reconciler) retryWait() time.Duration {
	limit := max(MaxRetryAfter, r.opts.RetryAfter)
	wait := r.opts.RetryAfter
	for i := 1; i < r.failures && wait < limit; i++ {
		wait *= 2
	}
	return min(wait, limit)
}

// Result describes one round.
type Result struct {
	Ran      bool // false: nothing was due
	Listed   int  // flows of the family seen in the dump
	Stale    int  // flows found stale
	Deleted  int  // stale flows the kernel no longer has
	Complete bool // every stale flow was handled within the budget
}
