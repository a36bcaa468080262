// Package runner provides a bounded-frequency runner: it calls a function
// when asked to, but never more often than a minimum interval, at least once
// per maximum interval, and again after a failure, backing off exponentially
// while the failures go on.
//
// It replaces upstream kube-proxy's BoundedFrequencyRunner with the same
// guarantees and an injected clock, so tests step time instead of sleeping.
package runner

import (
	"context"
	"sync/atomic"
	"time"

	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
)

// Runner calls fn with these guarantees, once Loop is running:
//
//   - fn never starts sooner than minInterval after the previous call
//     returned, however often Run is called; requests made meanwhile
//     coalesce into a single call.
//   - fn is called at least every maxInterval after the previous call
//     returned successfully, even if nobody calls Run.
//   - after fn returns an error it is called again after a backoff, whether
//     or not anybody calls Run: the first backoff is minInterval or
//     MinBackoff, whichever is longer; it doubles with each further
//     consecutive error, up to retryInterval (or minInterval, if that is
//     longer). Requests made during a backoff wait for its end and coalesce,
//     so a failing fn is not retried at every event. A success resets it.
//   - fn runs once as soon as Loop starts.
//
// Calls to fn never overlap: they all happen on Loop's goroutine.
type Runner struct {
	name          string
	fn            func() error
	minInterval   time.Duration
	retryInterval time.Duration
	maxInterval   time.Duration
	clock         clock.Clock

	// failures counts the consecutive errors of fn; owned by Loop's goroutine.
	failures int

	// requests holds at most one pending Run: further requests coalesce.
	requests chan struct{}
	looping  atomic.Bool

	// waiting, when set, is told each time Loop blocks until the given
	// time. Tests use it to know the loop is idle; production leaves it nil.
	waiting func(due time.Time)
}

// MinBackoff is the least wait before retrying a failed fn. A failed sync
// is usually retried as a full one, which reads the whole ruleset back from
// the kernel: with minSyncPeriod 0 (allowed, and IPVS's upstream default)
// and no floor, a persistent kernel error would retry in a tight loop. One
// second still retries a transient error (a held xtables lock, a racing
// nft) about as soon as upstream's default minSyncPeriod would.
const MinBackoff = time.Second

// New returns a Runner for fn. It does nothing until Loop is called.
func New(name string, fn func() error, minInterval, retryInterval, maxInterval time.Duration, clk clock.Clock) *Runner {
	return &Runner{
		name:          name,
		fn:            fn,
		minInterval:   minInterval,
		retryInterval: max(retryInterval, minInterval),
		maxInterval:   max(maxInterval, minInterval),
		clock:         clk,
		requests:      make(chan struct{}, 1),
	}
}

// Run asks for fn to be called as soon as the minimum interval allows. It
// never blocks. Before Loop starts it does nothing, because Loop calls fn
// right away when it starts anyway.
func (r *Runner) Run() {
	if !r.looping.Load() {
		return
	}
	select {
	case r.requests <- struct{}{}:
	default: // a request is already pending; this one coalesces into it
	}
}

// Loop calls fn as the guarantees require until ctx is done. Call it once.
func (r *Runner) Loop(ctx context.Context) {
	r.looping.Store(true)
	defer r.looping.Store(false)

	// earliest is the soonest a request may run fn; due is when fn runs
	// unless a request comes. The first call has no constraint.
	earliest := r.clock.Now()
	due := earliest
	for {
		if ctx.Err() != nil {
			return
		}
		now := r.clock.Now()
		if !now.Before(due) {
			earliest, due = r.runOnce()
			continue
		}
		timer := r.clock.NewTimer(due.Sub(now))
		if r.waiting != nil {
			r.waiting(due)
		}
		select {
		case <-ctx.Done():
		case <-timer.C():
		case <-r.requests:
			if earliest.Before(due) {
				due = earliest
			}
		}
		timer.Stop()
	}
}

// runOnce calls fn and returns the soonest a request may call it again and
// when the next call is due if nobody asks for one.
func (r *Runner) runOnce() (earliest, due time.Time) {
	err := r.fn()
	end := r.clock.Now()
	if err == nil {
		r.failures = 0
		return end.Add(r.minInterval), end.Add(r.maxInterval)
	}
	r.failures++
	wait := r.backoff()
	klog.ErrorS(err, "Run failed; backing off", "runner", r.name, "consecutiveFailures", r.failures, "retryAfter", wait)
	retry := end.Add(wait)
	return retry, retry
}

// backoff is the wait after the r.failures-th consecutive error.
func (r *Runner) backoff() time.Duration {
	wait := max(r.minInterval, MinBackoff)
	for i := 1; i < r.failures && wait < r.retryInterval; i++ {
		wait *= 2
	}
	return min(wait, r.retryInterval)
}
