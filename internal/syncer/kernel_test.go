package syncer

import (
	"context"
	"fmt"
	"net/netip"
	"path/filepath"
	"testing"
	"time"

	"github.com/svcproxy/svcproxy/internal/faultinject"
	"github.com/svcproxy/svcproxy/pkg/kiptables"
	"github.com/svcproxy/svcproxy/pkg/netnstest"
	"github.com/svcproxy/svcproxy/pkg/netnstest/scenario"
	"github.com/svcproxy/svcproxy/pkg/proxy"
	"github.com/svcproxy/svcproxy/pkg/proxy/desired"
	"github.com/svcproxy/svcproxy/pkg/proxy/iptables"
	"github.com/svcproxy/svcproxy/pkg/proxy/ipvs"
	"github.com/svcproxy/svcproxy/pkg/proxy/nftables"
)

// The poison: an LB Service with endpoints (its firewall is rendered).
var poisonSpec = scenario.Spec{Name: faultinject.PoisonPrefix, Slot: 37, LB: true, Endpoints: []scenario.EPSpec{{Pod: "pod-a"}}}

// TestKernelIsolatesRejectedService: a Service whose rules the kernel
// refuses is found and kept out; every other Service is programmed in the
// same sync and answers real traffic, and a Service created later is
// programmed without the poison being tried again.
func TestKernelIsolatesRejectedService(t *testing.T) {
	netnstest.RequireKernel(t, "nft", "iptables-nft-restore", "ip6tables-nft-restore")
	for _, m := range nativeModes {
		t.Run(string(m.mode), func(t *testing.T) { isolateInKernel(t, m) })
	}
}

// kernelMode is a mode the kernel quarantine tests run in. ebpf mode's
// (ebpf_kernel_test.go) opens the mode's row, which internal/backends
// holds: that package imports this one, so its tests are external.
type kernelMode struct {
	mode proxy.Mode
	// start makes the scenario cluster for the mode and returns it with
	// what opens the mode's backend in node1 for a new process.
	start func(t *testing.T) (*scenario.Env, openBackend)
}

type openBackend = func(t *testing.T, f scenario.Fam) Proxier

// nativeModes are the modes whose backend is one package of its own.
var nativeModes = []kernelMode{nativeMode(proxy.ModeNFTables), nativeMode(proxy.ModeIPTables)}

func nativeMode(mode proxy.Mode) kernelMode {
	return kernelMode{mode: mode, start: func(t *testing.T) (*scenario.Env, openBackend) {
		env := scenario.NewEnv(t)
		return env, func(t *testing.T, f scenario.Fam) Proxier { return backendFor(t, env, mode, f) }
	}}
}

func isolateInKernel(t *testing.T, m kernelMode) {
	env, open := m.start(t)
	for _, f := range scenario.Families {
		w := env.NewWorld(f)
		w.Feed(append(env.Services(), poisonSpec)...)
		fi := faultinject.Wrap(open(t, f), m.mode, f.Family)
		var quarantined []proxy.ServicePortName
		s := faultSyncer(t, w, f, fi, &quarantined)
		if err := env.Node1.NS.Do(s.syncOnce); err != nil {
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
		if err := env.Node1.NS.Do(s.syncOnce); err != nil {
			t.Fatalf("%s: sync after the poison: %v", f.Family, err)
		}
		if fi.Refused != refused {
			t.Errorf("%s: the unchanged poison was tried again (%d more refusals)", f.Family, fi.Refused-refused)
		}
		if err := askFromPodC(env, f, late.Slot); err != nil {
			t.Errorf("%s: the later Service does not answer: %v", f.Family, err)
		}
		quarantinedAnswers(t, env, f)
	}
}

// faultSyncer is a Syncer of w's State for family f over fi, which
// appends the ports it quarantines to quarantined.
func faultSyncer(t *testing.T, w *scenario.World, f scenario.Fam, fi *faultinject.Proxier, quarantined *[]proxy.ServicePortName) *Syncer {
	t.Helper()
	s, err := New(Options{Family: f.Family, Tracker: w.Tracker(), Proxier: Backend{Proxier: fi, PortHolder: fi},
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

// askFromPodC asks slot's cluster IP over TCP from each of pod-c's clients.
func askFromPodC(env *scenario.Env, f scenario.Fam, slot int) error {
	for _, c := range podCClients(env) {
		if _, err := c.Ask(proxy.TCP, netip.AddrPortFrom(f.ClusterIP(slot), scenario.SvcPort)); err != nil {
			return fmt.Errorf("slot %d from pod-c (cgroup %q): %w", slot, c.Cgroup, err)
		}
	}
	return nil
}

// quarantinedAnswers fails t if the poison answers any of pod-c's clients.
func quarantinedAnswers(t *testing.T, env *scenario.Env, f scenario.Fam) {
	t.Helper()
	for _, c := range podCClients(env) {
		if ans, err := c.Ask(proxy.TCP, netip.AddrPortFrom(f.ClusterIP(poisonSpec.Slot), scenario.SvcPort)); err == nil {
			t.Errorf("%s: the quarantined Service answers pod-c (cgroup %q): %s", f.Family, c.Cgroup, ans)
		}
	}
}

func backendFor(t *testing.T, env *scenario.Env, mode proxy.Mode, f scenario.Fam) Proxier {
	t.Helper()
	var p Proxier
	err := env.Node1.NS.Do(func() (err error) {
		switch mode {
		case proxy.ModeNFTables:
			p, err = nftables.New(f.Family, nftables.Options{})
		case proxy.ModeIPVS: // in the IPVS test VM (ipvs_vm_test.go)
			var ip *ipvs.Proxier
			if ip, err = ipvs.New(f.Family, ipvs.Options{ReapInterval: -1}); err == nil {
				t.Cleanup(ip.Close)
				p = ip
			}
		default:
			p, err = iptables.New(context.Background(), f.Family, iptables.Options{Flavour: kiptables.FlavourNFT, SyncPeriod: 30 * time.Second})
		}
		if err != nil {
			return err
		}
		return p.Init(context.Background())
	})
	if err != nil {
		t.Fatalf("%s %s backend: %v", mode, f.Family, err)
	}
	return p
}

// probingProxier checks after every Sync, accepted or not, that chosen
// healthy Services still answer: a search that takes them out of the
// kernel for a moment fails it.
type probingProxier struct {
	Proxier
	probe  func() error
	misses []error
	calls  int
}

func (p *probingProxier) Sync(ctx context.Context, st *desired.State, mode proxy.SyncMode) error {
	p.calls++
	err := p.Proxier.Sync(ctx, st, mode)
	if perr := p.probe(); perr != nil {
		p.misses = append(p.misses, perr)
	}
	return err
}

// TestKernelRestartWithPoisonKeepsServing: a process that quarantined a
// Service the kernel refuses is replaced by a new one (a new backend over
// the same kernel). The healthy Services answer after every sync the new
// process makes, and the poison is quarantined again by one retry.
func TestKernelRestartWithPoisonKeepsServing(t *testing.T) {
	netnstest.RequireKernel(t, "nft", "iptables-nft-restore", "ip6tables-nft-restore")
	for _, m := range nativeModes {
		t.Run(string(m.mode), func(t *testing.T) { restartWithPoison(t, m) })
	}
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
			if err := askFromPodC(env, f, slot); err != nil {
				return err
			}
		}
		return nil
	}
}

// startProcess is a new svcproxy process over node1's kernel (a new
// backend, a new syncer) that knows specs, with quarantine file file ("":
// none); it runs its first sync, probing after every Sync.
func startProcess(t *testing.T, env *scenario.Env, m kernelMode, open openBackend, f scenario.Fam, specs []scenario.Spec, file string,
	probe func() error) (*Syncer, *faultinject.Proxier, *probingProxier) {
	t.Helper()
	w := env.NewWorld(f)
	w.Feed(specs...)
	fi := faultinject.Wrap(open(t, f), m.mode, f.Family)
	pp := &probingProxier{Proxier: fi, probe: probe}
	s, err := New(Options{Family: f.Family, Tracker: w.Tracker(), Proxier: Backend{Proxier: pp, PortHolder: pp},
		Node: func() (desired.Node, bool) { return w.Node(), true }, Compute: w.Options(),
		MinSyncPeriod: time.Second, SyncPeriod: 30 * time.Second, QuarantineFile: file})
	if err != nil {
		t.Fatal(err)
	}
	if err := env.Node1.NS.Do(s.syncOnce); err != nil {
		t.Fatalf("%s: first sync: %v", f.Family, err)
	}
	return s, fi, pp
}

func restartWithPoison(t *testing.T, m kernelMode) {
	env, open := m.start(t)
	specs := append(env.Services(), poisonSpec, firstSpec, lastSpec)
	for _, f := range scenario.Families {
		file := filepath.Join(t.TempDir(), "quarantine.json")
		probe := probeFirstAndLast(env, f)
		startProcess(t, env, m, open, f, specs, file, probe)
		s, fi, pp := startProcess(t, env, m, open, f, specs, file, probe)
		if len(pp.misses) != 0 {
			t.Errorf("%s: after the restart's syncs healthy Services did not answer %d times (first: %v)", f.Family, len(pp.misses), pp.misses[0])
		}
		if len(s.quarantined) != len(scenario.Protocols) || fi.Refused != len(scenario.Protocols) {
			t.Errorf("%s: after the restart %d ports quarantined with %d refusals, want the poison's %d ports with one retry each",
				f.Family, len(s.quarantined), fi.Refused, len(scenario.Protocols))
		}
	}
}
