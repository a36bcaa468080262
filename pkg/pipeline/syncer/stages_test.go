package syncer

import (
	"flag"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr/funcr"
	"k8s.io/klog/v2"

	"github.com/svcproxy/svcproxy/pkg/pipeline/metrics"
)

// At verbosity 4 each sync logs its stages: how long the change took from
// its trigger time to the sync's request, how long the request waited for
// the loop, and commit, compute, backend and what follows.
func TestSyncStagesLogged(t *testing.T) {
	var fs flag.FlagSet
	klog.InitFlags(&fs)
	if err := fs.Set("v", "4"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = fs.Set("v", "0") })
	var mu sync.Mutex
	var lines []string
	klog.SetLogger(funcr.New(func(_, args string) {
		mu.Lock()
		defer mu.Unlock()
		if strings.Contains(args, "Sync stages") {
			lines = append(lines, args)
		}
	}, funcr.Options{Verbosity: 4}))
	t.Cleanup(klog.ClearLogger)

	f := newFixture(t, metrics.NFTablesSyncFailuresTotal)
	f.markSynced()
	f.tracker.OnServiceUpdate(nil, webService(nil))
	f.mustSync()
	trigger := f.clock.Now().Add(-50 * time.Millisecond)
	f.tracker.OnEndpointSliceUpdate(nil, webSlice(trigger, "10.0.1.1"))
	f.syncer.Request()
	f.clock.Step(30 * time.Millisecond)
	f.syncer.Request() // a second request before the sync: the first counts
	f.mustSync()

	mu.Lock()
	defer mu.Unlock()
	if len(lines) != 2 {
		t.Fatalf("want a stages line per sync, got %d: %q", len(lines), lines)
	}
	if strings.Contains(lines[0], `"waited"`) {
		t.Errorf("the first sync served no request, but logs a wait: %s", lines[0])
	}
	for _, want := range []string{`"mode"="partial"`, `"changed"=1`, `"waited"="30ms"`, `"triggerToRequest"="50ms"`, `"backend"="0s"`} {
		if !strings.Contains(lines[1], want) {
			t.Errorf("stages line lacks %s: %s", want, lines[1])
		}
	}
}
