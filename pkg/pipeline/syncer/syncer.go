package syncer

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/svcproxy/svcproxy/pkg/pipeline/desired"
	"github.com/svcproxy/svcproxy/pkg/pipeline/metrics"
	"github.com/svcproxy/svcproxy/pkg/pipeline/model"
	"github.com/svcproxy/svcproxy/pkg/pipeline/syncer/runner"
	"github.com/svcproxy/svcproxy/pkg/proxy"
)

// FullSyncPeriod is the longest time between two full syncs, as upstream's
// proxyutil.FullSyncPeriod.
const FullSyncPeriod = time.Hour

// readyPollInterval paces the check for "tracker synced and node known"
// before the first sync, in case nobody calls Request when that happens.
const readyPollInterval = time.Second

// readAheadLimit is how old Prepare's read of the kernel may be for the
// first sync to trust it instead of reading again.
const readAheadLimit = 30 * time.Second

// Tracker is what the syncer needs of a model.Tracker.
type Tracker interface {
	Synced() bool
	Commit() (*model.Snapshot, model.Changes)
}

// Health receives the per-family timestamps behind /healthz and /livez.
type Health interface {
	QueuedUpdate(family proxy.IPFamily)
	Updated(family proxy.IPFamily)
}

// ServiceHealth runs the healthCheckNodePort servers.
type ServiceHealth interface {
	Sync(nodePorts desired.NodePortAddrs, family proxy.IPFamily, checks []desired.HealthCheck)
}

// Options configure a Syncer. Tracker, Proxier and Node are required.
type Options struct {
	Family proxy.IPFamily
	// SyncFailures, if set, counts failed syncs by ip_family: the
	// failure metric of the backend's row (internal/backends).
	SyncFailures *prometheus.CounterVec
	Tracker      Tracker
	Proxier      Backend
	// Node returns this node as Compute needs it, and false while unknown.
	Node func() (desired.Node, bool)
	// Compute are the options of desired.Compute; fixed for the Syncer's life.
	Compute desired.Options
	// Health and ServiceHealth may be nil.
	Health        Health
	ServiceHealth ServiceHealth
	// MinSyncPeriod is the least time between syncs; SyncPeriod caps the
	// exponential backoff of retries after failures (and is half the
	// health timeout), and paces the Proxier's canary check. See
	// runner.Runner.
	MinSyncPeriod time.Duration
	SyncPeriod    time.Duration
	// Clock defaults to the real clock.
	Clock clock.Clock
	// AfterSync, if set, runs after each successful sync with the state
	// just programmed and the changes it consumed (conntrack cleanup).
	AfterSync func(state *desired.State, changes model.Changes)
	// AfterReadBack, if set, is told after Prepare's read-back whether
	// the kernel already held the Proxier's rules (RulesHolder).
	AfterReadBack func(rulesHeld bool)
	// ExpectedSize, if set, tells a Sizer how large the first State is
	// expected to be, once the initial lists' first pages said (it may
	// wait for them, within ctx); ok is false when they did not say.
	ExpectedSize func(ctx context.Context) (size proxy.ExpectedSize, ok bool)
	// Quarantined, if set, is told of each service port the kernel
	// rejected and that is kept out of the dataplane (for an Event).
	Quarantined QuarantineFunc
	// QuarantineFile, if set, keeps the quarantined service ports' names
	// for the next process (persist.go).
	QuarantineFile string
	// FrontendsLost, if set, is told of each service port that newly lost
	// external or LB frontends to a higher claim (for an Event).
	FrontendsLost func(name proxy.ServicePortName, lost []desired.LostFrontend)
}

// Syncer runs the sync loop of one IP family: commit the tracker, compute
// the desired state, program it, and keep health and metrics.
type Syncer struct {
	o      Options
	family string // the ip_family label value
	clock  clock.Clock
	runner *runner.Runner
	wake   chan struct{}
	full   atomic.Bool // RequestFull was called
	// canaryGone: the Proxier's canary was found missing (canary.go).
	canaryGone atomic.Bool

	// Owned by the loop goroutine.
	ctx  context.Context
	prev *desired.State // what the Proxier last programmed; nil forces a full sync
	// target is the State prev was programmed for, quarantined ports at
	// their rejected versions: the base of the next incremental Compute.
	target *desired.State
	// lastGood is the last State the Proxier accepted, kept across
	// failures: what a search for rejected ports starts from.
	lastGood *desired.State
	prevNode desired.Node
	lastFull time.Time
	// recover makes the next sync a RecoverySync: set at start, after a
	// failure and when the Proxier reported proxy.ErrStateLost.
	recover bool
	// readAhead: Prepare read the kernel back, so the first sync needs
	// no recovery of its own (decide consumes it).
	readAhead   bool
	readAheadAt time.Time
	prepareOnce sync.Once
	noLocal     noLocalCounts
	// quarantined are service ports the kernel rejected (isolate.go);
	// retryDue: the next successful sync tries them again.
	quarantined quarantine
	retryDue    bool
	// persisted: what QuarantineFile holds.
	persisted []persistKey
	// report is the latest Report, for readers on other goroutines.
	report atomic.Pointer[Report]
	// requestedAt is the first request not yet taken by a sync (Unix
	// nanoseconds; 0: none), for the stages log (stages.go).
	requestedAt atomic.Int64
}

// New returns a Syncer; nothing happens until Loop.
func New(o Options) (*Syncer, error) {
	if o.Tracker == nil || o.Proxier.Proxier == nil || o.Node == nil {
		return nil, errors.New("syncer: Tracker, Proxier and Node are required")
	}
	if o.Compute.Family == "" {
		o.Compute.Family = o.Family
	}
	if o.Clock == nil {
		o.Clock = clock.RealClock{}
	}
	s := &Syncer{o: o, family: string(o.Family), clock: o.Clock, wake: make(chan struct{}, 1), ctx: context.Background(),
		quarantined: quarantine{}, recover: true}
	s.runner = runner.New("sync-"+s.family, s.syncOnce, o.MinSyncPeriod, o.SyncPeriod, FullSyncPeriod, o.Clock)
	s.loadQuarantine()
	return s, nil
}

// Request asks for a sync as soon as minSyncPeriod allows. Tracker
// callbacks call it whenever they report a change, and the app when the
// node changes. Changes count against the health timeout only once the
// tracker has synced, as upstream does.
func (s *Syncer) Request() {
	now := s.clock.Now()
	s.markRequested(now)
	metrics.SyncProxyRulesLastQueuedTimestamp.WithLabelValues(s.family).Set(unixSeconds(now))
	if s.o.Health != nil && s.o.Tracker.Synced() {
		s.o.Health.QueuedUpdate(s.o.Family)
	}
	s.runner.Run()
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// RequestFull asks for the next sync to be a full one (e.g. the node's zone
// changed in a way the app wants reconciled everywhere) and requests it.
func (s *Syncer) RequestFull() {
	s.full.Store(true)
	s.Request()
}

// Prepare starts, in the background, what the first sync can do before the
// tracker has synced: a Proxier that is a Preparer reads the kernel back
// (at a restart of 10k Services, a few tenths of a second that would
// otherwise follow the initial lists). The app calls it as soon as the
// Syncer exists; Loop waits for it, and runs it itself if nobody did.
func (s *Syncer) Prepare(ctx context.Context) {
	go s.prepareOnce.Do(func() { s.readBack(ctx) })
}

func (s *Syncer) readBack(ctx context.Context) {
	p := s.o.Proxier.Preparer
	if p == nil {
		return
	}
	if z := s.o.Proxier.Sizer; z != nil && s.o.ExpectedSize != nil {
		z.ExpectSize(s.o.ExpectedSize)
	}
	if err := p.ReadBack(ctx); err != nil {
		klog.InfoS("Reading the kernel back before the first sync failed; the first sync will", "ipFamily", s.family, "err", err)
		return
	}
	s.readAhead, s.readAheadAt = true, s.clock.Now()
	if h := s.o.Proxier.RulesHolder; h != nil && s.o.AfterReadBack != nil {
		s.o.AfterReadBack(h.HoldsRules())
	}
}

// Loop syncs until ctx is done. The first sync runs as soon as the tracker
// has synced and the node is known; then the runner's guarantees apply.
func (s *Syncer) Loop(ctx context.Context) {
	s.ctx = ctx
	metrics.SyncProxyRulesLastQueuedTimestamp.WithLabelValues(s.family).Set(unixSeconds(s.clock.Now()))
	if s.o.Health != nil {
		s.o.Health.Updated(s.o.Family)
	}
	// Returns once Prepare's read-back is done (sync.Once), or does it.
	s.prepareOnce.Do(func() { s.readBack(ctx) })
	if !s.waitReady(ctx) {
		return
	}
	var canary sync.WaitGroup
	canary.Go(func() { s.watchCanary(ctx) })
	defer canary.Wait()
	s.runner.Loop(ctx)
}

// waitReady blocks until syncing makes sense, so that the first sync is not
// held back by minSyncPeriod after a pointless early attempt.
func (s *Syncer) waitReady(ctx context.Context) bool {
	for !s.ready() {
		select {
		case <-ctx.Done():
			return false
		case <-s.wake:
		case <-s.clock.After(readyPollInterval):
		}
	}
	return true
}

func (s *Syncer) ready() bool {
	if !s.o.Tracker.Synced() {
		return false
	}
	_, ok := s.o.Node()
	return ok
}

// syncOnce is the runner's function: one sync attempt.
// SyncOnce runs one sync now, in the calling goroutine: what Loop does each
// time it wakes. Tests drive a syncer with it, inside a network namespace.
func (s *Syncer) SyncOnce() error { return s.syncOnce() }

func (s *Syncer) syncOnce() error {
	if !s.o.Tracker.Synced() {
		klog.V(2).InfoS("Not syncing: services or endpoint slices not yet synced", "ipFamily", s.family)
		return nil
	}
	node, ok := s.o.Node()
	if !ok {
		klog.V(2).InfoS("Not syncing: node not yet known", "ipFamily", s.family)
		return nil
	}
	st := stages{start: s.clock.Now(), requested: s.takeRequested()}
	start := st.start
	snap, changes := s.o.Tracker.Commit()
	clearPending()
	st.committed = s.clock.Now()
	mode := s.decide(node, start)
	prev, base := s.prev, s.target
	if mode.Full() {
		prev, base = nil, nil
	}
	target := desired.Compute(base, snap, changes, node, s.o.Compute)
	st.computed = s.clock.Now()
	state := s.quarantined.apply(target, prev)
	if !mode.Full() && !state.SameGlobals(s.prev) {
		klog.V(2).InfoS("Node IPs, node port addresses, masquerading or service CIDRs changed; doing a full sync", "ipFamily", s.family)
		mode = proxy.FullSync
	}
	retry := s.dueForRetry()
	state, mode, err := s.program(state, mode)
	st.programmed = s.clock.Now()
	if err == nil && len(retry) > 0 {
		state, err = s.retryQuarantined(state, retry)
	}
	if err != nil && retry != nil {
		s.retryDue = true // after the sync that succeeds
	}
	metrics.QuarantinedServicePorts.WithLabelValues(s.family).Set(float64(len(s.quarantined)))
	s.saveQuarantine()
	end := s.clock.Now()
	s.publish(state, mode, err, start, end)
	metrics.SyncProxyRulesLatency.WithLabelValues(s.family).Observe(end.Sub(start).Seconds())
	if err != nil {
		s.failed()
		return fmt.Errorf("sync %s proxy rules: %w", s.family, err)
	}
	if mode.Full() {
		s.lastFull = start
	}
	s.reportLosses(s.prev, state)
	if s.prev == nil {
		s.logFirstSync(state, start, end)
	}
	s.prev, s.target, s.lastGood, s.prevNode = state, target, state, node
	s.succeeded(prev, state, mode, changes, start, end)
	if len(changes.TriggerTimes) > 0 {
		st.firstTrigger = changes.TriggerTimes[0]
	}
	st.log(s.family, mode, len(state.Changed), s.clock.Now())
	return nil
}

// logFirstSync says, once per family, when the node started to serve
// Services and what the first sync cost (the lists before it are the
// informers'); with an early part, also when that part was done.
func (s *Syncer) logFirstSync(state *desired.State, start, end time.Time) {
	kv := []any{"ipFamily", s.family, "servicePorts", state.Services.Len(), "elapsed", end.Sub(start)}
	if early := s.o.Proxier.EarlyServer; early != nil && !early.ServedAt().IsZero() {
		kv = append(kv, "connectTimeElapsed", early.ServedAt().Sub(start))
	}
	klog.InfoS("First sync programmed", kv...)
}

// decide picks how much of the kernel this sync reconciles, before the
// State is computed; syncOnce then upgrades a partial sync whose State
// changed a global input (desired.State.SameGlobals), and syncProxier one
// the Proxier refuses. Nothing else decides it.
//
//   - RecoverySync at start, after a failure, after the Proxier reported
//     proxy.ErrStateLost and when its canary is gone: the Proxier's record
//     of the kernel is not to be trusted; but FullSync for the first sync
//     when Prepare read the kernel back just before (readAhead);
//   - FullSync when asked (RequestFull), when the node changed, and at
//     least every FullSyncPeriod;
//   - PartialSync otherwise.
func (s *Syncer) decide(node desired.Node, now time.Time) proxy.SyncMode {
	forced := s.full.Swap(false)
	canaryGone := s.canaryGone.Swap(false)
	lost := s.recover
	s.recover = false
	// A read older than readAheadLimit (an API server that kept the lists
	// waiting) may miss what someone else did to the kernel meanwhile.
	readAhead := s.readAhead && now.Sub(s.readAheadAt) < readAheadLimit
	s.readAhead = false
	switch {
	case readAhead && !canaryGone:
		return proxy.FullSync
	case lost, canaryGone, s.prev == nil:
		return proxy.RecoverySync
	case forced:
		return proxy.FullSync
	case !sameNode(s.prevNode, node):
		klog.V(2).InfoS("Node changed; doing a full sync", "ipFamily", s.family)
		return proxy.FullSync
	case now.Sub(s.lastFull) >= FullSyncPeriod:
		// Retry what the kernel rejected, in case the cause was passing.
		s.retryDue = true
		return proxy.FullSync
	}
	return proxy.PartialSync
}

// syncProxier hands state to the Proxier in mode and reads its report: a
// partial sync it refuses with proxy.ErrFullSyncNeeded is redone at once as
// a full one, and proxy.ErrStateLost counts as done but makes the next sync
// a recovery. It returns the mode the Proxier ran.
func (s *Syncer) syncProxier(state *desired.State, mode proxy.SyncMode) (proxy.SyncMode, error) {
	err := s.o.Proxier.Sync(s.ctx, state, mode)
	if mode == proxy.PartialSync && errors.Is(err, proxy.ErrFullSyncNeeded) {
		klog.V(2).InfoS("The backend needs a full sync", "ipFamily", s.family, "reason", err)
		mode = proxy.FullSync
		err = s.o.Proxier.Sync(s.ctx, state, mode)
	}
	if errors.Is(err, proxy.ErrStateLost) {
		klog.InfoS("The backend lost track of the kernel; the next sync is a recovery sync", "ipFamily", s.family, "reason", err)
		s.recover = true
		err = nil
	}
	return mode, err
}

func (s *Syncer) failed() {
	// The Proxier may have programmed part of the state: forget what it
	// had, so the next sync is a recovery sync. lastGood stays: the next
	// search for rejected ports starts from it.
	s.prev, s.target = nil, nil
	s.recover = true
	if s.o.SyncFailures != nil {
		s.o.SyncFailures.WithLabelValues(s.family).Inc()
	}
}

func (s *Syncer) succeeded(prev, state *desired.State, mode proxy.SyncMode, changes model.Changes, start, end time.Time) {
	elapsed := end.Sub(start).Seconds()
	if mode.Full() {
		metrics.SyncFullProxyRulesLatency.WithLabelValues(s.family).Observe(elapsed)
	} else {
		metrics.SyncPartialProxyRulesLatency.WithLabelValues(s.family).Observe(elapsed)
	}
	metrics.SyncProxyRulesLastTimestamp.WithLabelValues(s.family).Set(unixSeconds(end))
	observeProgramming(metrics.NetworkProgrammingLatency, s.family, changes.TriggerTimes, end)
	if early := s.o.Proxier.EarlyServer; early != nil {
		if at := early.ServedAt(); !at.IsZero() {
			metrics.EarlyServedLastTimestamp.WithLabelValues(s.family).Set(unixSeconds(at))
			observeProgramming(metrics.EarlyProgrammingLatency, s.family, changes.TriggerTimes, at)
		}
	}
	s.noLocal.update(prev, state)
	s.noLocal.publish(s.family)

	if s.o.Health != nil {
		s.o.Health.Updated(s.o.Family)
	}
	if s.o.ServiceHealth != nil {
		s.o.ServiceHealth.Sync(state.NodePorts, s.o.Family, state.HealthChecks)
	}
	if s.o.AfterSync != nil {
		if mode == proxy.RecoverySync {
			// The kernel may have been without these rules (flushed, or
			// a failed sync): flows made meanwhile were never translated.
			changes.ConntrackCleanup = true
		}
		s.o.AfterSync(state, changes)
	}
}

// observeProgramming observes in h's family child, for each change's
// trigger time, how long it took until done; a trigger from a skewed clock
// ahead of done is skipped rather than counted as 0. The child is made
// only when there is something to observe: until then the histogram is
// not exposed, as upstream's is not.
func observeProgramming(h interface {
	WithLabelValues(...string) prometheus.Observer
}, family string, triggers []time.Time, done time.Time) {
	for _, trigger := range triggers {
		if latency := done.Sub(trigger); latency >= 0 {
			h.WithLabelValues(family).Observe(latency.Seconds())
		}
	}
}

// reportLosses logs and reports the frontends a service port lost that it
// had not lost in the previous programmed State.
func (s *Syncer) reportLosses(prev, state *desired.State) {
	for name, lost := range state.Lost {
		if prev != nil && slices.Equal(prev.Lost[name], lost) {
			continue
		}
		klog.InfoS("Service port loses frontends claimed by others", "ipFamily", s.family, "servicePort", name, "lost", lost)
		if s.o.FrontendsLost != nil {
			s.o.FrontendsLost(name, lost)
		}
	}
}

// sameNode compares what every service port may depend on (a test keeps
// it complete). ServiceCIDRs reach the backend only as State.ServiceCIDRs,
// which SameGlobals compares. ClusterNodeIPs only decide refused frontends,
// which an incremental Compute redecides itself when they change: a Node
// joining the cluster costs no full sync of every node; Peers likewise only
// decide the ports with a DSR, which Compute redecides, and ClusterSources
// reach only the tc programs, which render the whole State at every sync
// (desired.State.SameGlobals). HostAddrs is left out on purpose: only node ports use it, Compute recomputes them on
// every call, and host addresses come and go with every pod whose veth has
// one — a full recompute for each would be O(services) per pod start.
func sameNode(a, b desired.Node) bool {
	return a.Name == b.Name && a.Zone == b.Zone &&
		slices.Equal(a.IPs, b.IPs) && slices.Equal(a.PodCIDRs, b.PodCIDRs)
}

func unixSeconds(t time.Time) float64 { return float64(t.UnixNano()) / 1e9 }
