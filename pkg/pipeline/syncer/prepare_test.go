package syncer

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/svcproxy/svcproxy/pkg/pipeline/metrics"
	"github.com/svcproxy/svcproxy/pkg/proxy"
)

// preparingProxier is a fakeProxier that is also a Preparer.
type preparingProxier struct {
	*fakeProxier
	reads int
	err   error
}

func (p *preparingProxier) ReadBack(context.Context) error {
	p.reads++
	return p.err
}

func newPreparingFixture(t *testing.T, readErr error) (*fixture, *preparingProxier) {
	f := newFixture(t, metrics.NFTablesSyncFailuresTotal)
	p := &preparingProxier{fakeProxier: f.proxier, err: readErr}
	f.syncer.o.Proxier = Backend{Proxier: p, Preparer: p}
	return f, p
}

// prepare runs Prepare and then waits for it exactly as Loop does (whichever
// of the two gets to the sync.Once first reads the kernel, once).
func (f *fixture) prepare() {
	ctx := context.Background()
	f.syncer.Prepare(ctx)
	f.syncer.prepareOnce.Do(func() { f.syncer.readBack(ctx) })
}

// TestPrepareMakesFirstSyncFull: a Proxier that read the kernel back ahead
// gets a full sync first, not a recovery that would read it again; after
// that the usual reasons apply.
func TestPrepareMakesFirstSyncFull(t *testing.T) {
	f, p := newPreparingFixture(t, nil)
	f.prepare()
	if p.reads != 1 {
		t.Fatalf("%d read-backs, want 1", p.reads)
	}
	f.markSynced()
	f.wantMode("first sync after the read-back", proxy.FullSync)
	f.wantMode("nothing happened", proxy.PartialSync)
	f.proxier.setFail(errors.New("boom"))
	if err := f.syncer.syncOnce(); err == nil {
		t.Fatal("failure not reported")
	}
	f.proxier.setFail(nil)
	f.wantMode("after a failure", proxy.RecoverySync)
}

// TestPrepareFailedOrStale: a read-back that failed, or one older than
// readAheadLimit when the first sync comes, leaves the first sync a
// recovery; so does a canary found missing meanwhile.
func TestPrepareFailedOrStale(t *testing.T) {
	f, _ := newPreparingFixture(t, errors.New("netlink: no answer"))
	f.prepare()
	f.markSynced()
	f.wantMode("read-back failed", proxy.RecoverySync)

	f, _ = newPreparingFixture(t, nil)
	f.prepare()
	f.clock.Step(readAheadLimit + time.Second)
	f.markSynced()
	f.wantMode("read-back too old", proxy.RecoverySync)

	f, _ = newPreparingFixture(t, nil)
	f.prepare()
	f.syncer.canaryGone.Store(true)
	f.markSynced()
	f.wantMode("canary gone since the read-back", proxy.RecoverySync)
}

// TestNoPrepareWithoutPreparer: a Proxier that is not a Preparer (iptables,
// IPVS) starts with a recovery sync, Prepare or not.
func TestNoPrepareWithoutPreparer(t *testing.T) {
	f := newFixture(t, metrics.IPTablesRestoreFailuresTotal)
	f.prepare()
	f.markSynced()
	f.wantMode("first sync", proxy.RecoverySync)
}

// TestPrepareOnlyWhatTheBackendNames: a Proxier that has ReadBack but whose
// Backend names no Preparer (a wrapper that hides it on purpose) is not read
// back ahead: the capability is what the row says, not what the type has.
func TestPrepareOnlyWhatTheBackendNames(t *testing.T) {
	f, p := newPreparingFixture(t, nil)
	f.syncer.o.Proxier = Backend{Proxier: p}
	f.prepare()
	if p.reads != 0 {
		t.Fatalf("%d read-backs of a Proxier whose Backend names no Preparer, want 0", p.reads)
	}
	f.markSynced()
	f.wantMode("first sync", proxy.RecoverySync)
}

// holdingProxier is a preparingProxier that reports whether its read-back
// found rules (RulesHolder).
type holdingProxier struct {
	*preparingProxier
	held bool
}

func (p *holdingProxier) HoldsRules() bool { return p.held }

// TestAfterReadBackTellsWhetherRulesWereHeld: the hook hears the Proxier's
// answer after a successful read-back, and nothing after a failed one or
// from a Proxier that cannot tell.
func TestAfterReadBackTellsWhetherRulesWereHeld(t *testing.T) {
	for _, tc := range []struct {
		name     string
		readErr  error
		holder   bool
		held     bool
		wantCall []bool
	}{
		{"restart", nil, true, true, []bool{true}},
		{"cold start", nil, true, false, []bool{false}},
		{"read-back failed", errors.New("netlink: no answer"), true, true, nil},
		{"not a RulesHolder", nil, false, true, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f, p := newPreparingFixture(t, tc.readErr)
			if tc.holder {
				h := &holdingProxier{preparingProxier: p, held: tc.held}
				f.syncer.o.Proxier = Backend{Proxier: h, Preparer: h, RulesHolder: h}
			}
			var calls []bool
			f.syncer.o.AfterReadBack = func(held bool) { calls = append(calls, held) }
			f.prepare()
			if !slices.Equal(calls, tc.wantCall) {
				t.Fatalf("AfterReadBack calls %v, want %v", calls, tc.wantCall)
			}
		})
	}
}

// sizingProxier is a preparingProxier that is also a Sizer: its ReadBack
// asks the size it was handed, as ebpf mode's does when it creates maps.
type sizingProxier struct {
	*preparingProxier
	expected func(context.Context) (proxy.ExpectedSize, bool)
	asked    []proxy.ExpectedSize
}

func (p *sizingProxier) ExpectSize(expected func(context.Context) (proxy.ExpectedSize, bool)) {
	p.expected = expected
}

func (p *sizingProxier) ReadBack(ctx context.Context) error {
	if p.expected != nil {
		if size, ok := p.expected(ctx); ok {
			p.asked = append(p.asked, size)
		}
	}
	return p.preparingProxier.ReadBack(ctx)
}

// TestPrepareHandsTheExpectedSize: a Sizer's read-back ahead of the first
// sync can ask the family's expected size (Options.ExpectedSize); without
// that option, or when the Backend names no Sizer, it is handed nothing
// and prepares as before.
func TestPrepareHandsTheExpectedSize(t *testing.T) {
	want := proxy.ExpectedSize{ServicePorts: 10000, EndpointPorts: 100000}
	for _, tc := range []struct {
		name      string
		option    bool
		sizer     bool
		wantAsked int
	}{
		{"option and sizer", true, true, 1},
		{"no option", false, true, 0},
		{"no sizer", true, false, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f, p := newPreparingFixture(t, nil)
			s := &sizingProxier{preparingProxier: p}
			f.syncer.o.Proxier = Backend{Proxier: s, Preparer: s}
			if tc.sizer {
				f.syncer.o.Proxier.Sizer = s
			}
			if tc.option {
				f.syncer.o.ExpectedSize = func(context.Context) (proxy.ExpectedSize, bool) { return want, true }
			}
			f.prepare()
			if len(s.asked) != tc.wantAsked || (tc.wantAsked > 0 && s.asked[0] != want) {
				t.Errorf("the read-back asked %v, want %d answers of %v", s.asked, tc.wantAsked, want)
			}
			if p.reads != 1 {
				t.Errorf("%d read-backs, want 1", p.reads)
			}
			f.markSynced()
			f.wantMode("first sync after the read-back", proxy.FullSync)
		})
	}
}
