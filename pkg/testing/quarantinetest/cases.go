// Package quarantinetest holds the kernel quarantine cases: a Service whose
// rules the kernel refuses (pkg/testing/faultinject corrupts them) must be
// isolated while every other Service keeps answering real traffic, across
// syncs and restarts. Each mode runs them from its own tests: the native
// backends from pkg/pipeline/syncer's, ebpf mode (whose row composes two
// backends) from internal/backends'.
package quarantinetest

import (
	"context"
	"fmt"
	"net/netip"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/svcproxy/svcproxy/pkg/pipeline/desired"
	"github.com/svcproxy/svcproxy/pkg/pipeline/syncer"
	"github.com/svcproxy/svcproxy/pkg/proxy"
	"github.com/svcproxy/svcproxy/pkg/testing/faultinject"
	"github.com/svcproxy/svcproxy/pkg/testing/netnstest"
	"github.com/svcproxy/svcproxy/pkg/testing/netnstest/scenario"
)

// Mode is a mode the cases run in: Start makes the scenario cluster for
// the mode and returns it with what opens the mode's backend in node1 for
// a new process.
type Mode struct {
	Mode  proxy.Mode
	Start func(t *testing.T) (*scenario.Env, Open)
}

// Open opens the mode's backend for family f in node1, initialised.
type Open = func(t *testing.T, f scenario.Fam) syncer.Proxier

// Cases are the kernel quarantine cases by name.
var Cases = map[string]func(*testing.T, Mode){
	"IsolatesRejectedService":       isolateInKernel,
	"RestartWithPoisonKeepsServing": restartWithPoison,
	"RestartMeetsANewPoison":        newPoisonAtRestart,
}

var (
	_ syncer.PortHolder = (*faultinject.Proxier)(nil)
	_ syncer.PortHolder = (*Probing)(nil)
)

// Poison is the Service the cases corrupt: an LB Service with endpoints (its firewall is rendered).
var Poison = scenario.Spec{Name: faultinject.PoisonPrefix, Slot: 37, LB: true, Endpoints: []scenario.EPSpec{{Pod: "pod-a"}}}

// isolateInKernel: a Service whose rules the kernel refuses is found and
// kept out; every other Service is programmed in the same sync and answers
// real traffic, and a Service created later is programmed without the
// poison being tried again.
func isolateInKernel(t *testing.T, m Mode) {
	env, open := m.Start(t)
	for _, f := range scenario.Families {
		w := env.NewWorld(f)
		w.Feed(append(env.Services(), Poison)...)
		fi := faultinject.Wrap(open(t, f), m.Mode, f.Family)
		var quarantined []proxy.ServicePortName
		s := NewSyncer(t, w, f, fi, &quarantined)
		if err := env.Node1.NS.Do(s.SyncOnce); err != nil {
			t.Fatalf("%s: the sync failed instead of isolating the poison: %v", f.Family, err)
		}
		if fi.Refused == 0 {
			t.Fatalf("%s: the backend never refused the corrupted Service: the test proves nothing", f.Family)
		}
		if len(quarantined) != len(scenario.Protocols) {
			t.Errorf("%s: quarantined %v, want poison's %d ports", f.Family, quarantined, len(scenario.Protocols))
		}
		t.Run(string(f.Family), func(t *testing.T) { env.ReachableCases(t, f) })

		// A Service created later: one sync, no new refusal.
		refused := fi.Refused
		late := scenario.Spec{Name: "late", Slot: 38, Endpoints: []scenario.EPSpec{{Pod: "pod-b"}}}
		w.Feed(late)
		if err := env.Node1.NS.Do(s.SyncOnce); err != nil {
			t.Fatalf("%s: sync after the poison: %v", f.Family, err)
		}
		if fi.Refused != refused {
			t.Errorf("%s: the unchanged poison was tried again (%d more refusals)", f.Family, fi.Refused-refused)
		}
		if err := AskFromPodC(env, f, late.Slot); err != nil {
			t.Errorf("%s: the later Service does not answer: %v", f.Family, err)
		}
		QuarantinedAnswers(t, env, f)
	}
}

// NewSyncer is a Syncer of w's State for family f over fi, which appends
// the ports it quarantines to quarantined.
func NewSyncer(t *testing.T, w *scenario.World, f scenario.Fam, fi *faultinject.Proxier, quarantined *[]proxy.ServicePortName) *syncer.Syncer {
	t.Helper()
	s, err := syncer.New(syncer.Options{Family: f.Family, Tracker: w.Tracker(), Proxier: syncer.Backend{Proxier: fi, PortHolder: fi},
		Node: func() (desired.Node, bool) { return w.Node(), true }, Compute: w.Options(),
		MinSyncPeriod: time.Second, SyncPeriod: 30 * time.Second,
		Quarantined: func(name proxy.ServicePortName, _ error) { *quarantined = append(*quarantined, name) }})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// podCClients are pod-c's clients: in ebpf mode one in the hooks' cgroup
// (the hooks translate it, or else the rules) and one outside it (the
// rules alone); in the other modes one.
func podCClients(env *scenario.Env) []netnstest.Client {
	clients := []netnstest.Client{env.FromPod("pod-c")}
	if env.Translated("pod-c") {
		clients = append(clients, netnstest.Client{NS: env.Pods["pod-c"].NS})
	}
	for i := range clients {
		clients[i].Timeout = scenario.DropTimeout
	}
	return clients
}

// AskFromPodC asks slot's cluster IP over TCP from each of pod-c's clients.
func AskFromPodC(env *scenario.Env, f scenario.Fam, slot int) error {
	for _, c := range podCClients(env) {
		if _, err := c.Ask(proxy.TCP, netip.AddrPortFrom(f.ClusterIP(slot), scenario.SvcPort)); err != nil {
			return fmt.Errorf("slot %d from pod-c (cgroup %q): %w", slot, c.Cgroup, err)
		}
	}
	return nil
}

// QuarantinedAnswers fails t if the poison answers any of pod-c's clients.
func QuarantinedAnswers(t *testing.T, env *scenario.Env, f scenario.Fam) {
	t.Helper()
	for _, c := range podCClients(env) {
		if ans, err := c.Ask(proxy.TCP, netip.AddrPortFrom(f.ClusterIP(Poison.Slot), scenario.SvcPort)); err == nil {
			t.Errorf("%s: the quarantined Service answers pod-c (cgroup %q): %s", f.Family, c.Cgroup, ans)
		}
	}
}

// Probing checks after every Sync, accepted or not, that chosen healthy
// Services still answer (Probe): a search that takes them out of the kernel
// for a moment fails it. Misses are the failed probes, Calls the syncs.
type Probing struct {
	syncer.Proxier
	Probe  func() error
	Misses []error
	Calls  int
}

func (p *Probing) Sync(ctx context.Context, st *desired.State, mode proxy.SyncMode) error {
	p.Calls++
	err := p.Proxier.Sync(ctx, st, mode)
	if perr := p.Probe(); perr != nil {
		p.Misses = append(p.Misses, perr)
	}
	return err
}

// First and last in name order: a search from nothing tries one half of
// the Services without the other.
var (
	firstSpec = scenario.Spec{Name: "aaa-first", Slot: 39, Endpoints: []scenario.EPSpec{{Pod: "pod-a"}}}
	lastSpec  = scenario.Spec{Name: "zzz-last", Slot: 40, Endpoints: []scenario.EPSpec{{Pod: "pod-a"}}}
)

// probeFirstAndLast asks the first and the last healthy Service over TCP.
func probeFirstAndLast(env *scenario.Env, f scenario.Fam) func() error {
	return func() error {
		for _, slot := range []int{firstSpec.Slot, lastSpec.Slot} {
			if err := AskFromPodC(env, f, slot); err != nil {
				return err
			}
		}
		return nil
	}
}

// startProcess is a new svcproxy process over node1's kernel (a new
// backend, a new syncer) that knows specs, with quarantine file file ("":
// none); it runs its first sync, probing after every Sync.
func startProcess(t *testing.T, env *scenario.Env, m Mode, open Open, f scenario.Fam, specs []scenario.Spec, file string,
	probe func() error) (*syncer.Syncer, *faultinject.Proxier, *Probing) {
	t.Helper()
	w := env.NewWorld(f)
	w.Feed(specs...)
	fi := faultinject.Wrap(open(t, f), m.Mode, f.Family)
	pp := &Probing{Proxier: fi, Probe: probe}
	s, err := syncer.New(syncer.Options{Family: f.Family, Tracker: w.Tracker(), Proxier: syncer.Backend{Proxier: pp, PortHolder: pp},
		Node: func() (desired.Node, bool) { return w.Node(), true }, Compute: w.Options(),
		MinSyncPeriod: time.Second, SyncPeriod: 30 * time.Second, QuarantineFile: file})
	if err != nil {
		t.Fatal(err)
	}
	if err := env.Node1.NS.Do(s.SyncOnce); err != nil {
		t.Fatalf("%s: first sync: %v", f.Family, err)
	}
	return s, fi, pp
}

// restartWithPoison: a process that quarantined a Service the kernel
// refuses is replaced by a new one (a new backend over the same kernel).
// The healthy Services answer after every sync the new process makes, and
// the poison is quarantined again by one retry.
func restartWithPoison(t *testing.T, m Mode) {
	env, open := m.Start(t)
	specs := append(env.Services(), Poison, firstSpec, lastSpec)
	for _, f := range scenario.Families {
		file := filepath.Join(t.TempDir(), "quarantine.json")
		probe := probeFirstAndLast(env, f)
		startProcess(t, env, m, open, f, specs, file, probe)
		s, fi, pp := startProcess(t, env, m, open, f, specs, file, probe)
		if len(pp.Misses) != 0 {
			t.Errorf("%s: after the restart's syncs healthy Services did not answer %d times (first: %v)", f.Family, len(pp.Misses), pp.Misses[0])
		}
		if len(s.Report().Quarantined) != len(scenario.Protocols) || fi.Refused != len(scenario.Protocols) {
			t.Errorf("%s: after the restart %d ports quarantined with %d refusals, want the poison's %d ports with one retry each",
				f.Family, len(s.Report().Quarantined), fi.Refused, len(scenario.Protocols))
		}
	}
}

// HeldPorts is PortHolder when the wrapped Proxier is one.
func (p *Probing) HeldPorts(ctx context.Context, st *desired.State) (map[proxy.ServicePortName]struct{}, error) {
	if h, ok := p.Proxier.(syncer.PortHolder); ok {
		return h.HeldPorts(ctx, st)
	}
	return nil, nil
}

// newPoisonAtRestart: a process programs healthy Services and stops; a
// Service the kernel refuses is created meanwhile; a new process starts
// without a quarantine file (kubeadm's DaemonSet keeps none), so its first
// sync is rejected with nothing accepted to search from. The healthy
// Services answer after every sync it makes and all along its start, and
// the poison is quarantined.
func newPoisonAtRestart(t *testing.T, m Mode) {
	env, open := m.Start(t)
	healthy := append(env.Services(), firstSpec, lastSpec)
	for _, f := range scenario.Families {
		probe := probeFirstAndLast(env, f)
		startProcess(t, env, m, open, f, healthy, "", probe)
		if err := probe(); err != nil {
			t.Fatalf("%s: healthy Services do not answer before the restart: %v", f.Family, err)
		}
		stop := probeMeanwhile(probe)
		s, fi, pp := startProcess(t, env, m, open, f, append(healthy, Poison), "", probe)
		probes, misses := stop()
		t.Logf("%s: the new process's first sync: %d backend syncs, %d refused; %d probes meanwhile",
			f.Family, pp.Calls, fi.Refused, probes)
		if fi.Refused == 0 {
			t.Fatalf("%s: the backend never refused the poison: the test proves nothing", f.Family)
		}
		if len(pp.Misses) != 0 {
			t.Errorf("%s: healthy Services did not answer after %d of the new process's %d syncs (first: %v)",
				f.Family, len(pp.Misses), pp.Calls, pp.Misses[0])
		}
		if len(misses) != 0 {
			t.Errorf("%s: healthy Services did not answer %d of %d times during the start (first: %v)",
				f.Family, len(misses), probes, misses[0])
		}
		if len(s.Report().Quarantined) != len(scenario.Protocols) {
			t.Errorf("%s: %d ports quarantined, want the poison's %d", f.Family, len(s.Report().Quarantined), len(scenario.Protocols))
		}
		QuarantinedAnswers(t, env, f)
	}
}

// probeMeanwhile runs probe over and over until the returned stop is
// called, which reports how many probes ran and which failed.
func probeMeanwhile(probe func() error) (stop func() (int, []error)) {
	done := make(chan struct{})
	var misses []error
	probes := 0
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			select {
			case <-done:
				return
			case <-time.After(5 * time.Millisecond):
			}
			probes++
			if err := probe(); err != nil {
				misses = append(misses, err)
			}
		}
	})
	return func() (int, []error) {
		close(done)
		wg.Wait()
		return probes, misses
	}
}
