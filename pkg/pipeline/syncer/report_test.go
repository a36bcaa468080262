package syncer

import (
	"errors"
	"testing"

	"github.com/svcproxy/svcproxy/pkg/proxy"
)

// The Report tells what the last sync did, which ports are quarantined
// with the kernel's error and what the kernel holds for them, and why a
// failed sync failed; a published Report does not change afterwards.
func TestReportTellsSyncsAndQuarantine(t *testing.T) {
	f, p, _ := newPoisonFixture(t)
	if r := f.syncer.Report(); r.Family != proxy.IPv4 || !r.LastAttempt.IsZero() {
		t.Fatalf("Report before any sync: %+v, want only the family", r)
	}
	f.tracker.OnServiceUpdate(nil, svcNamed("web", "172.30.1.1", 80))
	f.tracker.OnServiceUpdate(nil, svcNamed("bad", "172.30.1.2", poisonPort))
	f.markSynced()
	if err := f.syncer.syncOnce(); err != nil {
		t.Fatal(err)
	}
	first := f.syncer.Report()
	if first.LastError != "" || first.LastSuccess.IsZero() || first.LastMode != "recovery" || first.ServicePorts != 1 {
		t.Errorf("after the first sync: %+v, want a successful recovery sync of 1 port", first)
	}
	if len(first.Quarantined) != 1 {
		t.Fatalf("quarantined %+v, want ns/bad alone", first.Quarantined)
	}
	q := first.Quarantined[0]
	if q.Name != portOf("bad") || q.Error == "" || q.Since.IsZero() || q.Rejected == nil || q.Rejected.Port != poisonPort || q.Held != nil {
		t.Errorf("quarantined port %+v, want ns/bad at its rejected version, the kernel's error, nothing held", q)
	}

	p.global = errors.New("kernel on fire")
	f.tracker.OnServiceUpdate(nil, svcNamed("new", "172.30.1.3", 80))
	if err := f.syncer.syncOnce(); err == nil {
		t.Fatal("the sync succeeded against a failing kernel")
	}
	failed := f.syncer.Report()
	if failed.LastError == "" || !failed.LastSuccess.Equal(first.LastSuccess) || failed.ServicePorts != 1 {
		t.Errorf("after a failed sync: %+v, want its error beside the last success", failed)
	}
	if first.LastError != "" || len(first.Quarantined) != 1 {
		t.Errorf("the earlier Report changed: %+v", first)
	}
}
