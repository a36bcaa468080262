package syncer

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"

	v1 "k8s.io/api/core/v1"

	"github.com/svcproxy/svcproxy/pkg/pipeline/desired"
	"github.com/svcproxy/svcproxy/pkg/pipeline/metrics"
	"github.com/svcproxy/svcproxy/pkg/pipeline/model"
	"github.com/svcproxy/svcproxy/pkg/proxy"
	"github.com/svcproxy/svcproxy/pkg/testing/proxytest"
)

// poisonPort is a service port number the kernel of poisonProxier refuses.
const poisonPort = 666

// poisonProxier accepts a State only if no service port in it uses
// poisonPort, like a kernel refusing one Service's rules makes the whole
// transaction fail. It keeps what it last accepted.
type poisonProxier struct {
	fakeProxier
	programmed model.PortMap[*desired.ServicePort]
	rejected   int
	global     error // fails every Sync when set
	// cured: the kernel accepts poisonPort now.
	cured bool
	// pair, if set, names two Services the kernel refuses together only.
	pair [2]string
	// dropped counts the healthy ports (not on poisonPort) that an
	// accepted Sync removed from the kernel.
	dropped int
	// notApplied: its rejections report proxy.ErrNotApplied (true: it
	// keeps what it accepted last).
	notApplied bool
}

func (p *poisonProxier) Sync(ctx context.Context, s *desired.State, mode proxy.SyncMode) error {
	_ = p.fakeProxier.Sync(ctx, s, mode)
	err := p.global
	if err == nil {
		if err = p.refuses(s); err != nil {
			p.rejected++
		}
	}
	if err != nil && p.notApplied {
		return fmt.Errorf("%w: %w", proxy.ErrNotApplied, err)
	}
	if err != nil {
		return err
	}
	for name, sp := range p.programmed.All() {
		if _, ok := s.Services.Get(name); !ok && sp.Port != poisonPort {
			p.dropped++
		}
	}
	p.programmed = s.Services
	return nil
}

func (p *poisonProxier) refuses(s *desired.State) error {
	if p.pair != [2]string{} {
		if s.Service(portOf(p.pair[0])) != nil && s.Service(portOf(p.pair[1])) != nil {
			return fmt.Errorf("netlink: file exists (%s and %s)", p.pair[0], p.pair[1])
		}
		return nil
	}
	if p.cured {
		return nil
	}
	for name, sp := range s.Services.All() {
		if sp.Port == poisonPort {
			return fmt.Errorf("netlink: file exists (%s)", name)
		}
	}
	return nil
}

func svcNamed(name string, ip string, port int32) *v1.Service {
	return proxytest.MakeService("ns", name, func(svc *v1.Service) {
		svc.Spec.ClusterIP, svc.Spec.ClusterIPs = ip, []string{ip}
		svc.Spec.Ports = []v1.ServicePort{{Name: "p", Protocol: v1.ProtocolTCP, Port: port}}
	})
}

func portOf(name string) proxy.ServicePortName {
	return proxy.ServicePortName{ServiceName: proxy.ServiceName{Namespace: "ns", Name: name}, Port: "p", Protocol: proxy.TCP}
}

func newPoisonFixture(t *testing.T) (*fixture, *poisonProxier, *[]proxy.ServicePortName) {
	f := newFixture(t, metrics.NFTablesSyncFailuresTotal)
	p := &poisonProxier{}
	f.syncer.o.Proxier = Backend{Proxier: p}
	var reported []proxy.ServicePortName
	f.syncer.o.Quarantined = func(name proxy.ServicePortName, err error) { reported = append(reported, name) }
	return f, p, &reported
}

func has(m model.PortMap[*desired.ServicePort], name proxy.ServicePortName) bool {
	_, ok := m.Get(name)
	return ok
}

func programmedNames(p *poisonProxier) []string {
	var out []string
	for name := range p.programmed.Keys() {
		out = append(out, name.Name)
	}
	slices.Sort(out)
	return out
}

// One Service the kernel refuses must not keep the others out: the first,
// full sync programs all but it, reports it, and counts it.
func TestIsolateOffenderInFullSync(t *testing.T) {
	f, p, reported := newPoisonFixture(t)
	var want []string
	for i := range 20 {
		name, port := fmt.Sprintf("s%02d", i), int32(80)
		if i == 13 {
			port = poisonPort
		} else {
			want = append(want, name)
		}
		f.tracker.OnServiceUpdate(nil, svcNamed(name, fmt.Sprintf("172.30.1.%d", i+1), port))
	}
	f.markSynced()
	if err := f.syncer.syncOnce(); err != nil {
		t.Fatalf("sync failed although only one port is refused: %v", err)
	}
	if got := programmedNames(p); !slices.Equal(got, want) {
		t.Errorf("programmed %v, want every Service but s13", got)
	}
	if !slices.Equal(*reported, []proxy.ServicePortName{portOf("s13")}) {
		t.Errorf("reported %v, want ns/s13:p", *reported)
	}
	if calls := p.count(); calls > 2*5+2 {
		t.Errorf("%d Sync calls to find one offender among 20, want about 2·log2(20)", calls)
	}
	if g := gaugeValue(t, metrics.QuarantinedServicePorts.WithLabelValues("IPv4")); g != 1 {
		t.Errorf("%s = %v, want 1", "svcproxy_quarantined_service_ports", g)
	}

	// Unchanged, it stays out without another rejected attempt; a change
	// elsewhere is programmed at once.
	rejected := p.rejected
	f.tracker.OnServiceUpdate(nil, svcNamed("late", "172.30.2.1", 80))
	if err := f.syncer.syncOnce(); err != nil {
		t.Fatal(err)
	}
	if p.rejected != rejected || !has(p.programmed, portOf("late")) || has(p.programmed, portOf("s13")) {
		t.Errorf("after a later change: rejected %d more, programmed %v", p.rejected-rejected, programmedNames(p))
	}

	// Fixed, it is tried again and programmed; the quarantine is lifted.
	f.tracker.OnServiceUpdate(nil, svcNamed("s13", "172.30.1.14", 8080))
	if err := f.syncer.syncOnce(); err != nil {
		t.Fatal(err)
	}
	if !has(p.programmed, portOf("s13")) || len(f.syncer.quarantined) != 0 {
		t.Errorf("fixed Service not programmed (quarantine %v)", f.syncer.quarantined)
	}
	if g := gaugeValue(t, metrics.QuarantinedServicePorts.WithLabelValues("IPv4")); g != 0 {
		t.Errorf("quarantine gauge %v after the fix, want 0", g)
	}
}

// An offender arriving with other changes in one incremental sync: the
// others are programmed in that same sync; what was programmed stays. When
// the rejections applied nothing (proxy.ErrNotApplied), the kernel keeps
// the last accepted State: the search then needs no recovery sync, only
// one full sync of its base (which a failure of the base's own would
// show) and partial syncs, and finds the same offender.
func TestIsolateOffenderInPartialSync(t *testing.T) {
	for _, notApplied := range []bool{false, true} {
		t.Run(fmt.Sprintf("notApplied=%t", notApplied), func(t *testing.T) {
			f, p, reported := newPoisonFixture(t)
			p.notApplied = notApplied
			modes := syncAfterOld(t, f, p)
			if got := programmedNames(p); !slices.Equal(got, []string{"a", "b", "c", "d", "old"}) {
				t.Errorf("programmed %v", got)
			}
			if !slices.Equal(*reported, []proxy.ServicePortName{portOf("bad")}) {
				t.Errorf("reported %v", *reported)
			}
			// The State the syncer builds on does not hold the offender either.
			if f.syncer.prev.Service(portOf("bad")) != nil {
				t.Error("the offender is in the syncer's programmed State")
			}
			t.Logf("Sync calls: %v", modes)
			if notApplied {
				onlyBaseFull(t, modes)
			}
		})
	}
}

// onlyBaseFull fails t unless modes hold no recovery sync and one full
// sync.
func onlyBaseFull(t *testing.T, modes []proxy.SyncMode) {
	t.Helper()
	full := 0
	for _, m := range modes {
		if m == proxy.RecoverySync {
			t.Errorf("a recovery sync in the search: modes %v", modes)
			return
		}
		if m == proxy.FullSync {
			full++
		}
	}
	if full != 1 {
		t.Errorf("%d full syncs in the search (modes %v), want 1: its base", full, modes)
	}
}

// A failure that is not any Service's (the kernel refuses everything) is a
// plain failed sync: nothing is quarantined.
func TestIsolateGlobalFailure(t *testing.T) {
	f, p, reported := newPoisonFixture(t)
	for i := range 4 {
		f.tracker.OnServiceUpdate(nil, svcNamed(fmt.Sprintf("s%d", i), fmt.Sprintf("172.30.1.%d", i+1), 80))
	}
	f.markSynced()
	p.global = errors.New("nft: command not found")
	if err := f.syncer.syncOnce(); err == nil {
		t.Fatal("sync succeeded with a kernel that refuses everything")
	}
	if len(*reported) != 0 || len(f.syncer.quarantined) != 0 {
		t.Errorf("quarantined %v on a global failure", *reported)
	}
	p.global = nil
	if err := f.syncer.syncOnce(); err != nil || p.programmed.Len() != 4 {
		t.Errorf("after recovery: err %v, programmed %v", err, programmedNames(p))
	}
}

// syncAfterOld syncs "old", then five new ports of which one is refused,
// and returns the modes of the Sync calls of the second sync.
func syncAfterOld(t *testing.T, f *fixture, p *poisonProxier) []proxy.SyncMode {
	t.Helper()
	f.tracker.OnServiceUpdate(nil, svcNamed("old", "172.30.1.1", 80))
	f.markSynced()
	if err := f.syncer.syncOnce(); err != nil {
		t.Fatal(err)
	}
	for i, name := range []string{"a", "b", "bad", "c", "d"} {
		port := int32(80)
		if name == "bad" {
			port = poisonPort
		}
		f.tracker.OnServiceUpdate(nil, svcNamed(name, fmt.Sprintf("172.30.3.%d", i+1), port))
	}
	before := p.count()
	if err := f.syncer.syncOnce(); err != nil {
		t.Fatalf("sync: %v", err)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.modes[before:])
}

// A kernel that refuses everything, applying nothing, after a State it
// accepted: the full sync of the search's base is refused too, so nothing
// is quarantined and the sync fails.
func TestIsolateGlobalFailureNothingApplied(t *testing.T) {
	f, p, reported := newPoisonFixture(t)
	p.notApplied = true
	f.tracker.OnServiceUpdate(nil, svcNamed("old", "172.30.1.1", 80))
	f.markSynced()
	if err := f.syncer.syncOnce(); err != nil {
		t.Fatal(err)
	}
	p.global = errors.New("iptables-restore: line 3 failed")
	f.tracker.OnServiceUpdate(nil, svcNamed("new", "172.30.1.2", 80))
	if err := f.syncer.syncOnce(); err == nil {
		t.Fatal("sync succeeded with a kernel that refuses everything")
	}
	if len(*reported) != 0 {
		t.Errorf("quarantined %v on a global failure", *reported)
	}
}
