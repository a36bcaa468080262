package syncer

import (
	"context"
	"errors"
	"github.com/prometheus/client_golang/prometheus"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/svcproxy/svcproxy/pkg/fieldcheck"
	"github.com/svcproxy/svcproxy/pkg/pipeline/desired"
	"github.com/svcproxy/svcproxy/pkg/pipeline/metrics"
	"github.com/svcproxy/svcproxy/pkg/proxy"
)

// syncMode runs one sync and returns the mode the Proxier was given last.
func (f *fixture) syncMode() proxy.SyncMode {
	f.t.Helper()
	if err := f.syncer.syncOnce(); err != nil {
		f.t.Fatalf("sync: %v", err)
	}
	_, mode := f.proxier.lastCall(f.t)
	return mode
}

// syncedFixture is a fixture past its first (recovery) sync.
func syncedFixture(t *testing.T, failures *prometheus.CounterVec) *fixture {
	f := newFixture(t, failures)
	f.markSynced()
	f.syncMode()
	return f
}

func (f *fixture) wantMode(why string, want proxy.SyncMode) {
	f.t.Helper()
	if got := f.syncMode(); got != want {
		f.t.Errorf("%s: %s sync, want %s", why, got, want)
	}
}

// TestDecideEachReason: the syncer alone picks the mode, for each reason
// there is; with none, the sync is partial.
func TestDecideEachReason(t *testing.T) {
	f := newFixture(t, metrics.NFTablesSyncFailuresTotal)
	f.syncer.o.Compute.NodePortAddresses = []string{"192.0.2.0/24"}
	f.markSynced()
	f.wantMode("first sync", proxy.RecoverySync)
	f.wantMode("nothing happened", proxy.PartialSync)

	f.syncer.RequestFull()
	f.wantMode("RequestFull", proxy.FullSync)

	f.nodeMu.Lock()
	f.node.Zone = "elsewhere"
	f.nodeMu.Unlock()
	f.wantMode("node changed", proxy.FullSync)

	// Host addresses are not compared as the node (sameNode); the node
	// port addresses Compute derives from them are a global input.
	f.nodeMu.Lock()
	f.node.HostAddrs = []netip.Addr{netip.MustParseAddr("192.0.2.7")}
	f.nodeMu.Unlock()
	f.wantMode("node port addresses changed", proxy.FullSync)
	f.wantMode("after the global change", proxy.PartialSync)

	f.clock.Step(FullSyncPeriod)
	f.wantMode("an hour after the last full sync", proxy.FullSync)

	f.proxier.setFail(errors.New("boom"))
	if err := f.syncer.syncOnce(); err == nil {
		t.Fatal("failure not reported")
	}
	f.proxier.setFail(nil)
	f.wantMode("after a failure", proxy.RecoverySync)
	f.wantMode("after the recovery", proxy.PartialSync)
}

// TestStateLostMakesNextSyncRecovery: a Proxier that reports
// proxy.ErrStateLost has synced (health and AfterSync see it) and gets a
// recovery sync next.
func TestStateLostMakesNextSyncRecovery(t *testing.T) {
	f := syncedFixture(t, metrics.NFTablesSyncFailuresTotal)
	f.proxier.report = func(proxy.SyncMode) error { return errors.Join(errors.New("stale chains"), proxy.ErrStateLost) }
	updated, after := f.health.updated, len(f.after)
	f.wantMode("the sync that loses the state", proxy.PartialSync)
	if f.health.updated != updated+1 || len(f.after) != after+1 {
		t.Error("a sync reporting a lost state did not count as done")
	}
	f.wantMode("after a lost state", proxy.RecoverySync)
	f.wantMode("after the recovery", proxy.PartialSync)
}

// TestFullSyncNeededRetriesFullAtOnce: a partial sync the Proxier refuses
// is redone fully in the same sync, and counted as a full one.
func TestFullSyncNeededRetriesFullAtOnce(t *testing.T) {
	f := syncedFixture(t, metrics.IPTablesRestoreFailuresTotal)
	f.proxier.report = func(mode proxy.SyncMode) error {
		return errors.Join(errors.New("large-cluster mode"), proxy.ErrFullSyncNeeded)
	}
	full := histogramCount(t, metrics.SyncFullProxyRulesLatency.WithLabelValues("IPv4"))
	n := f.proxier.count()
	f.wantMode("a refused partial sync", proxy.FullSync)
	if calls := f.proxier.count() - n; calls != 2 {
		t.Errorf("%d Proxier syncs, want the refused partial and the full one", calls)
	}
	if got := histogramCount(t, metrics.SyncFullProxyRulesLatency.WithLabelValues("IPv4")) - full; got != 1 {
		t.Errorf("full sync histogram +%d, want +1", got)
	}
	f.wantMode("the sync after", proxy.PartialSync)
}

// TestCanaryGoneMakesRecoverySync: the syncer polls the Proxier's canary;
// a missing canary requests a sync, which is a recovery; an error or a
// present canary changes nothing.
func TestCanaryGoneMakesRecoverySync(t *testing.T) {
	f := syncedFixture(t, metrics.NFTablesSyncFailuresTotal)
	ctx := context.Background()
	f.proxier.canaryErr = errors.New("netlink: no answer")
	f.syncer.checkCanary(ctx)
	f.proxier.canaryErr = nil
	f.syncer.checkCanary(ctx)
	f.wantMode("canary present or unreadable", proxy.PartialSync)

	f.proxier.canaryGone = true
	f.syncer.checkCanary(ctx)
	f.proxier.canaryGone = false
	select {
	case <-f.syncer.wake:
	default:
		t.Error("a missing canary did not request a sync")
	}
	seen := len(f.after)
	f.wantMode("canary gone", proxy.RecoverySync)
	f.wantMode("after the recovery", proxy.PartialSync)
	// Flows made while the rules were gone are never translated: the
	// recovery asks the conntrack cleanup to look, the next sync does not.
	if got := f.after[seen:]; len(got) != 2 || !got[0].ConntrackCleanup || got[1].ConntrackCleanup {
		t.Errorf("AfterSync's ConntrackCleanup after the recovery and the next sync: %+v", got)
	}
}

// TestLoopPollsCanaryEverySyncPeriod: the loop checks the canary once per
// SyncPeriod on its clock, and stops with the loop.
func TestLoopPollsCanaryEverySyncPeriod(t *testing.T) {
	f := newFixture(t, metrics.NFTablesSyncFailuresTotal)
	f.markSynced()
	f.proxier.calls = make(chan *desired.State, 10)
	f.proxier.canaryGone = true
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { f.syncer.Loop(ctx); close(done) }()
	f.syncer.Request()
	<-f.proxier.calls // the first sync
	go func() {
		for range f.proxier.calls { // keep the loop's syncs flowing
		}
	}()
	// Each step lets the canary check run; the sync it requests is a
	// recovery (the first sync was one too: look past it).
	waitFor(t, func() bool {
		f.clock.Step(syncPeriod)
		f.proxier.mu.Lock()
		defer f.proxier.mu.Unlock()
		return slices.Contains(f.proxier.modes[1:], proxy.RecoverySync)
	})
	cancel()
	select {
	case <-done:
	case <-time.After(30 * time.Second): // hang guard only
		t.Fatal("Loop did not return")
	}
}

// TestSameNodeComparesEveryField keeps sameNode complete: every field of
// desired.Node is compared except HostAddrs and ServiceCIDRs, which reach
// the backend only through State fields that SameGlobals compares (node
// port addresses, service CIDRs), and ClusterNodeIPs, Peers and
// ClusterSources, which Compute compares itself. A new Node field must be added to one side or the other.
func TestSameNodeComparesEveryField(t *testing.T) {
	want := []string{"ClusterNodeIPs", "ClusterSources", "HostAddrs", "Peers", "ServiceCIDRs"}
	if missed := fieldcheck.Uncompared(sameNode); !slices.Equal(missed, want) {
		t.Errorf("sameNode leaves out %v, want exactly %v", missed, want)
	}
}
