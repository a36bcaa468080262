package syncer

import (
	"path/filepath"
	"testing"

	"github.com/svcproxy/svcproxy/pkg/pipeline/desired"
	"github.com/svcproxy/svcproxy/pkg/pipeline/model"
)

// A rejected update of a programmed port leaves its previous version in
// the kernel; a restart keeps it there (the file holds that version, not
// only the name) instead of dropping the port until its Service changes,
// through the first sync and the retry after it.
func TestQuarantineKeepsAHeldVersionAcrossARestart(t *testing.T) {
	file := filepath.Join(t.TempDir(), "quarantine-IPv4.json")
	start := func(kernel model.PortMap[*desired.ServicePort]) (*fixture, *poisonProxier) {
		f, p, _ := newPoisonFixture(t)
		f.syncer.o.QuarantineFile = file
		f.syncer.loadQuarantine()
		p.programmed = kernel
		f.markSynced()
		return f, p
	}
	f, first := start(model.PortMap[*desired.ServicePort]{})
	f.tracker.OnServiceUpdate(nil, svcNamed("web", "172.30.1.1", 80))
	mustSyncOnce(t, f)
	f.tracker.OnServiceUpdate(nil, svcNamed("web", "172.30.1.1", poisonPort))
	mustSyncOnce(t, f)
	held, _ := first.programmed.Get(portOf("web"))
	if held == nil || held.Port != 80 || f.syncer.quarantined[portOf("web")] == nil {
		t.Fatalf("before the restart: the kernel holds %v for the quarantined update, want the previous version", held)
	}

	f, p := start(first.programmed)
	f.tracker.OnServiceUpdate(nil, svcNamed("web", "172.30.1.1", poisonPort))
	for i := range 2 { // the first sync, and the retry after it
		mustSyncOnce(t, f)
		if sp, _ := p.programmed.Get(portOf("web")); sp == nil || !sp.Equal(held) {
			t.Errorf("restart, sync %d: the kernel holds %v, want the previous version %v", i+1, sp, held)
		}
		if f.syncer.quarantined[portOf("web")] == nil {
			t.Errorf("restart, sync %d: the rejected update is no longer quarantined", i+1)
		}
	}
}

func mustSyncOnce(t *testing.T, f *fixture) {
	t.Helper()
	if err := f.syncer.syncOnce(); err != nil {
		t.Fatal(err)
	}
}
