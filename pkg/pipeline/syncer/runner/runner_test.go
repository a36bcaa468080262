package runner

import (
	"context"
	"errors"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"
)

const (
	minInterval   = 1 * time.Second
	retryInterval = 30 * time.Second
	maxInterval   = time.Hour
	// deadlock guards a channel receive; it is not a timing assertion.
	deadlock = 30 * time.Second
)

var start = time.Date(2026, 7, 1, 12, 0, 0, 0, time.UTC)

// harness runs a Runner on a fake clock. Every call of fn and every time
// the loop goes idle is reported on a channel, so tests advance in lock
// step with the loop and never sleep.
type harness struct {
	t      *testing.T
	clock  *clocktesting.FakeClock
	runner *Runner
	calls  chan time.Time // the fake time at which fn was called
	idle   chan time.Time // the time the loop waits for
	errs   chan error     // what fn returns, one per call; nil when empty
}

// newHarness starts the loop; fn returns the given errors on its first calls.
func newHarness(t *testing.T, errs ...error) *harness {
	t.Helper()
	h := &harness{
		t:     t,
		clock: clocktesting.NewFakeClock(start),
		calls: make(chan time.Time, 100),
		idle:  make(chan time.Time, 100),
		errs:  make(chan error, 100),
	}
	for _, err := range errs {
		h.errs <- err
	}
	fn := func() error {
		h.calls <- h.clock.Now()
		select {
		case err := <-h.errs:
			return err
		default:
			return nil
		}
	}
	h.runner = New("test", fn, minInterval, retryInterval, maxInterval, h.clock)
	h.runner.waiting = func(due time.Time) { h.idle <- due }
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { h.runner.Loop(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	return h
}

func (h *harness) expectCall(at time.Time) {
	h.t.Helper()
	select {
	case got := <-h.calls:
		if !got.Equal(at) {
			h.t.Fatalf("fn called at %v, want %v", got.Sub(start), at.Sub(start))
		}
	case <-time.After(deadlock):
		h.t.Fatalf("fn not called (want at %v)", at.Sub(start))
	}
}

// expectIdle waits until the loop blocks and checks when it will next run
// fn unless asked. It also checks fn was not called in between.
func (h *harness) expectIdle(due time.Time) {
	h.t.Helper()
	select {
	case got := <-h.idle:
		if !got.Equal(due) {
			h.t.Fatalf("loop waits until %v, want %v", got.Sub(start), due.Sub(start))
		}
	case <-time.After(deadlock):
		h.t.Fatalf("loop never went idle (want due %v)", due.Sub(start))
	}
	select {
	case got := <-h.calls:
		h.t.Fatalf("unexpected call of fn at %v", got.Sub(start))
	default:
	}
}

func TestRunsOnceAtStart(t *testing.T) {
	h := newHarness(t)
	h.expectCall(start)
	h.expectIdle(start.Add(maxInterval))
}

func TestRunBeforeLoopIsNoOp(t *testing.T) {
	clk := clocktesting.NewFakeClock(start)
	r := New("test", func() error { return nil }, minInterval, retryInterval, maxInterval, clk)
	r.Run()
	if len(r.requests) != 0 {
		t.Fatalf("Run before Loop queued a request")
	}
}

func TestMinIntervalAfterPreviousRunFinished(t *testing.T) {
	h := newHarness(t)
	h.expectCall(start)
	h.expectIdle(start.Add(maxInterval))

	// A request 300ms after the run waits until minInterval has passed.
	h.clock.Step(300 * time.Millisecond)
	h.runner.Run()
	h.expectIdle(start.Add(minInterval))

	// More requests coalesce: the due time does not move and fn runs once.
	h.runner.Run()
	h.expectIdle(start.Add(minInterval))
	h.runner.Run()
	h.expectIdle(start.Add(minInterval))

	// Just short of the due time the loop's timer has not fired, so the loop
	// cannot have woken: fn is certainly not called.
	h.clock.Step(699 * time.Millisecond)
	if h.clock.Waiters() != 1 {
		t.Fatalf("want exactly the loop's timer pending, got %d waiters", h.clock.Waiters())
	}
	h.clock.Step(1 * time.Millisecond)
	h.expectCall(start.Add(minInterval))
	h.expectIdle(start.Add(minInterval + maxInterval))
}

func TestRequestLongAfterPreviousRunRunsAtOnce(t *testing.T) {
	h := newHarness(t)
	h.expectCall(start)
	h.expectIdle(start.Add(maxInterval))

	h.clock.Step(10 * time.Second)
	h.runner.Run()
	h.expectCall(start.Add(10 * time.Second))
	h.expectIdle(start.Add(10*time.Second + maxInterval))
}

func TestMinIntervalCountsFromEndOfRun(t *testing.T) {
	h := newHarness(t)
	h.expectCall(start)
	h.expectIdle(start.Add(maxInterval))

	// fn takes 5s this time (it advances the fake clock itself).
	h.runner.fn = func() error {
		h.calls <- h.clock.Now()
		h.clock.Step(5 * time.Second)
		return nil
	}
	h.clock.Step(2 * time.Second)
	h.runner.Run()
	h.expectCall(start.Add(2 * time.Second))
	end := start.Add(7 * time.Second)
	h.expectIdle(end.Add(maxInterval))
	h.runner.Run()
	h.expectIdle(end.Add(minInterval))
}

func TestRunsAtLeastEveryMaxInterval(t *testing.T) {
	h := newHarness(t)
	h.expectCall(start)
	for i := 1; i <= 3; i++ {
		due := start.Add(time.Duration(i) * maxInterval)
		h.expectIdle(due)
		h.clock.Step(maxInterval)
		h.expectCall(due)
	}
}

// TestFailuresBackOffExponentially: consecutive errors wait 1, 2, 4, 8,
// 16 s, then retryInterval (30 s) for good; a success returns to the normal
// cadence and the next error starts again at the first step.
func TestFailuresBackOffExponentially(t *testing.T) {
	h := newHarness(t, errors.New("boom"))
	h.expectCall(start)
	at := start
	for _, wait := range []time.Duration{1, 2, 4, 8, 16, 30, 30} {
		wait *= time.Second
		h.expectIdle(at.Add(wait))
		h.errs <- errors.New("boom again")
		h.clock.Step(wait)
		at = at.Add(wait)
		h.expectCall(at)
	}
	// That last call failed too: still capped. Then one succeeds.
	h.expectIdle(at.Add(retryInterval))
	h.clock.Step(retryInterval)
	at = at.Add(retryInterval)
	h.expectCall(at)
	h.expectIdle(at.Add(maxInterval))

	// The next failure starts the backoff over.
	h.errs <- errors.New("boom once more")
	h.clock.Step(10 * time.Second)
	at = at.Add(10 * time.Second)
	h.runner.Run()
	h.expectCall(at)
	h.expectIdle(at.Add(MinBackoff))
}

// TestRequestsDuringBackoffWait: events arriving while fn keeps failing do
// not retry it any sooner than the backoff; they coalesce into the retry.
func TestRequestsDuringBackoffWait(t *testing.T) {
	h := newHarness(t, errors.New("boom"), errors.New("boom again"))
	h.expectCall(start)
	h.expectIdle(start.Add(1 * time.Second))
	h.clock.Step(1 * time.Second)
	h.expectCall(start.Add(1 * time.Second))
	retry := start.Add(3 * time.Second) // second failure: 2 s backoff
	h.expectIdle(retry)

	// minInterval (1 s) has passed, but the backoff (2 s) has not.
	h.clock.Step(1500 * time.Millisecond)
	for range 3 {
		h.runner.Run()
		h.expectIdle(retry)
	}
	h.clock.Step(500 * time.Millisecond)
	h.expectCall(retry)
	h.expectIdle(retry.Add(maxInterval))
}

// TestBackoffFloorWithZeroMinInterval: minSyncPeriod 0 must not turn a
// persistent error into a tight retry loop.
func TestBackoffFloorWithZeroMinInterval(t *testing.T) {
	clk := clocktesting.NewFakeClock(start)
	r := New("test", func() error { return nil }, 0, retryInterval, maxInterval, clk)
	for n, want := range map[int]time.Duration{1: MinBackoff, 2: 2 * MinBackoff, 10: retryInterval} {
		r.failures = n
		if got := r.backoff(); got != want {
			t.Errorf("backoff after %d failures = %v, want %v", n, got, want)
		}
	}
	// A retryInterval below the floor caps it.
	r = New("test", func() error { return nil }, 0, 500*time.Millisecond, maxInterval, clk)
	r.failures = 1
	if got := r.backoff(); got != 500*time.Millisecond {
		t.Errorf("backoff with retryInterval 500ms = %v, want 500ms", got)
	}
}

func TestRetryIntervalNeverShorterThanMin(t *testing.T) {
	clk := clocktesting.NewFakeClock(start)
	r := New("test", func() error { return nil }, 10*time.Second, time.Second, 5*time.Second, clk)
	if r.retryInterval != 10*time.Second || r.maxInterval != 10*time.Second {
		t.Fatalf("retry=%v max=%v, want both raised to minInterval", r.retryInterval, r.maxInterval)
	}
}

func TestLoopStopsWithContext(t *testing.T) {
	clk := clocktesting.NewFakeClock(start)
	r := New("test", func() error { return nil }, minInterval, retryInterval, maxInterval, clk)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	idle := make(chan time.Time, 1)
	r.waiting = func(due time.Time) { idle <- due }
	go func() { r.Loop(ctx); close(done) }()
	<-idle
	cancel()
	select {
	case <-done:
	case <-time.After(deadlock):
		t.Fatal("Loop did not return after cancel")
	}
	if clk.HasWaiters() {
		t.Fatal("Loop left its timer behind")
	}
	r.Run() // after Loop returned, Run is a no-op again
	if len(r.requests) != 0 {
		t.Fatal("Run after Loop queued a request")
	}
}
