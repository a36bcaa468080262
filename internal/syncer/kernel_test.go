package syncer

import (
	"context"
	"net/netip"
	"testing"
	"time"

	"github.com/svcproxy/svcproxy/internal/faultinject"
	"github.com/svcproxy/svcproxy/internal/metrics"
	"github.com/svcproxy/svcproxy/pkg/kiptables"
	"github.com/svcproxy/svcproxy/pkg/netnstest"
	"github.com/svcproxy/svcproxy/pkg/netnstest/scenario"
	"github.com/svcproxy/svcproxy/pkg/proxy"
	"github.com/svcproxy/svcproxy/pkg/proxy/desired"
	"github.com/svcproxy/svcproxy/pkg/proxy/iptables"
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
	for _, mode := range []string{metrics.ModeNFTables, metrics.ModeIPTables} {
		t.Run(mode, func(t *testing.T) { isolateInKernel(t, mode) })
	}
}

func isolateInKernel(t *testing.T, mode string) {
	env := scenario.NewEnv(t)
	for _, f := range scenario.Families {
		w := env.NewWorld(f)
		w.Feed(append(env.Services(), poisonSpec)...)
		fi := faultinject.Wrap(backendFor(t, env, mode, f), mode, f.Family)
		var quarantined []proxy.ServicePortName
		s, err := New(Options{Family: f.Family, Mode: mode, Tracker: w.Tracker(), Proxier: fi,
			Node: func() (desired.Node, bool) { return w.Node(), true }, Compute: w.Options(),
			MinSyncPeriod: time.Second, SyncPeriod: 30 * time.Second,
			Quarantined: func(name proxy.ServicePortName, _ error) { quarantined = append(quarantined, name) }})
		if err != nil {
			t.Fatal(err)
		}
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
		if _, err := env.FromPod("pod-c").Ask(proxy.TCP, netip.AddrPortFrom(f.ClusterIP(38), scenario.SvcPort)); err != nil {
			t.Errorf("%s: the later Service does not answer: %v", f.Family, err)
		}
		blocked := netnstest.Client{NS: env.Pods["pod-c"].NS, Timeout: scenario.DropTimeout}
		if _, err := blocked.Ask(proxy.TCP, netip.AddrPortFrom(f.ClusterIP(37), scenario.SvcPort)); err == nil {
			t.Errorf("%s: the quarantined Service answers", f.Family)
		}
	}
}

func backendFor(t *testing.T, env *scenario.Env, mode string, f scenario.Fam) Proxier {
	t.Helper()
	var p Proxier
	err := env.Node1.NS.Do(func() (err error) {
		if mode == metrics.ModeNFTables {
			p, err = nftables.New(f.Family, nftables.Options{})
		} else {
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
