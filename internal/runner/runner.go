// Package runner provides a bounded-frequency runner: it calls a function
// when asked to, but never more often than a minimum interval, at least once
// per maximum interval, and again soon after a failure.
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
//   - after fn returns an error it is called again within retryInterval
//     (or minInterval, if that is longer).
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

	// requests holds at most one pending Run: further requests coalesce.
	requests chan struct{}
	looping  atomic.Bool

	// waiting, when set, is told each time Loop blocks until the given
	// time. Tests use it to know the loop is idle; production leaves it nil.
	waiting func(due time.Time)
}

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

	// The zero lastEnd puts no minimum-interval constraint on the first call.
	var lastEnd time.Time
	due := r.clock.Now()
	for {
		if ctx.Err() != nil {
			return
		}
		now := r.clock.Now()
		if !now.Before(due) {
			lastEnd, due = r.runOnce()
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
			if earliest := lastEnd.Add(r.minInterval); earliest.Before(due) {
				due = earliest
			}
		}
		timer.Stop()
	}
}

// runOnce calls fn and returns when it ended and when the next call is due
// if nobody asks for one.
func (r *Runner) runOnce() (end, next time.Time) {
	err := r.fn()
	end = r.clock.Now()
	if err != nil {
		klog.V(2).InfoS("Run failed; will retry", "runner", r.name, "retryInterval", r.retryInterval, "err", err)
		return end, end.Add(r.retryInterval)
	}
	return end, end.Add(r.maxInterval)
}
