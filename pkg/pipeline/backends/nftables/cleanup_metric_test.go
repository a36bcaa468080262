package nftables

import (
	"context"
	"errors"
	"strings"
	"testing"

	dto "github.com/prometheus/client_model/go"
	"sigs.k8s.io/knftables"

	"github.com/svcproxy/svcproxy/pkg/pipeline/metrics"
	"github.com/svcproxy/svcproxy/pkg/proxy"
	"github.com/svcproxy/svcproxy/pkg/testing/proxytest"
)

// cleanupFailingNFT rejects transactions that delete chains while armed,
// as a kernel that still finds a stale chain in use would.
type cleanupFailingNFT struct {
	*strictFake
	fail bool
}

func (f *cleanupFailingNFT) Run(ctx context.Context, tx *knftables.Transaction) error {
	if f.fail && strings.Contains(tx.String(), "delete chain") {
		return errors.New("injected: Device or resource busy")
	}
	return f.strictFake.Run(ctx, tx)
}

func cleanupFailures(t *testing.T) float64 {
	t.Helper()
	var m dto.Metric
	if err := metrics.NFTablesCleanupFailuresTotal.WithLabelValues("IPv4").Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetCounter().GetValue()
}

// TestCleanupFailureIsCountedNotFatal: as upstream's, a failed deletion of
// stale chains counts nftables_cleanup_failures_total and does not fail a
// sync that programmed everything else: the sync reports proxy.ErrStateLost,
// and the recovery sync the syncer answers with retries it.
func TestCleanupFailureIsCountedNotFatal(t *testing.T) {
	st := caseState(t, "session affinity", proxy.IPv4)
	fake := &cleanupFailingNFT{strictFake: newStrictFake(knftables.IPv4Family)}
	p := NewWithInterface(proxy.IPv4, fakeKernel(fake))
	mustSync(t, p, st)

	empty := withoutServices(st)
	before := cleanupFailures(t)
	fake.fail = true
	if err := p.Sync(context.Background(), empty, proxytest.ModeOf(empty)); !errors.Is(err, proxy.ErrStateLost) {
		t.Fatalf("a failed cleanup: %v, want proxy.ErrStateLost (done, but the next sync a recovery)", err)
	}
	if got := cleanupFailures(t) - before; got != 1 {
		t.Errorf("nftables_cleanup_failures_total +%v, want +1", got)
	}
	ref := newStrictFake(knftables.IPv4Family)
	mustSync(t, NewWithInterface(proxy.IPv4, fakeKernel(ref)), empty)
	if sortedDump(fake.strictFake) == sortedDump(ref) {
		t.Fatal("the injected failure left nothing behind; the test proves nothing")
	}

	// Nothing changes, yet the next sync deletes what was left.
	fake.fail = false
	again := *empty
	again.Changed = map[proxy.ServicePortName]struct{}{}
	if err := p.Sync(context.Background(), &again, proxy.PartialSync); !errors.Is(err, proxy.ErrFullSyncNeeded) {
		t.Fatalf("partial sync after the lost state: %v, want proxy.ErrFullSyncNeeded", err)
	}
	mustSyncIn(t, p, &again, proxy.RecoverySync)
	if sortedDump(fake.strictFake) != sortedDump(ref) {
		t.Errorf("the sync after a failed cleanup left objects behind:\n%s", fake.Dump())
	}
	if got := cleanupFailures(t) - before; got != 1 {
		t.Errorf("nftables_cleanup_failures_total +%v after the retry, want +1", got)
	}
}
