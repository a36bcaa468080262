package syncer

import (
	"context"
	"net/netip"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/svcproxy/svcproxy/internal/kiptables"
	"github.com/svcproxy/svcproxy/internal/metrics"
	"github.com/svcproxy/svcproxy/internal/netnstest"
	"github.com/svcproxy/svcproxy/internal/netnstest/scenario"
	"github.com/svcproxy/svcproxy/pkg/proxy"
	"github.com/svcproxy/svcproxy/pkg/proxy/desired"
	"github.com/svcproxy/svcproxy/pkg/proxy/iptables"
	"github.com/svcproxy/svcproxy/pkg/proxy/nftables"
)

// faultInjector stands in for a normalization bug: it corrupts the rules of
// one Service the way such a bug would, so that the real kernel (nftables)
// or iptables-restore refuses the transaction, and hands everything else
// unchanged to a real backend.
type faultInjector struct {
	Proxier
	poison  string
	corrupt func(*desired.ServicePort)
	refused int
}

func (fi *faultInjector) Sync(ctx context.Context, st *desired.State) error {
	out := *st
	out.Services = make(map[proxy.ServicePortName]*desired.ServicePort, len(st.Services))
	for name, sp := range st.Services {
		if name.Name == fi.poison {
			c := *sp
			fi.corrupt(&c)
			sp = &c
		}
		out.Services[name] = sp
	}
	err := fi.Proxier.Sync(ctx, &out)
	if err != nil {
		fi.refused++
	}
	return err
}

// The poison: an LB Service with endpoints (its firewall is rendered).
var poisonSpec = scenario.Spec{Name: "poison", Slot: 37, LB: true, Endpoints: []scenario.EPSpec{{Pod: "pod-a"}}}

// TestKernelIsolatesRejectedService: a Service whose rules the kernel
// refuses is found and kept out; every other Service is programmed in the
// same sync and answers real traffic, and a Service created later is
// programmed without the poison being tried again.
func TestKernelIsolatesRejectedService(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("kernel tests need root (network namespaces)")
	}
	for _, tool := range []string{"nft", "iptables-nft-restore", "ip6tables-nft-restore"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("kernel tests need %s: %v", tool, err)
		}
	}
	for _, mode := range []string{metrics.ModeNFTables, metrics.ModeIPTables} {
		t.Run(mode, func(t *testing.T) { isolateInKernel(t, mode) })
	}
}

func isolateInKernel(t *testing.T, mode string) {
	env := scenario.NewEnv(t)
	for _, f := range scenario.Families {
		w := env.NewWorld(f)
		w.Feed(append(env.Services(), poisonSpec)...)
		fi := &faultInjector{Proxier: backendFor(t, env, mode, f), poison: poisonSpec.Name, corrupt: corruption(mode, f)}
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
		if fi.refused == 0 {
			t.Fatalf("%s: the backend never refused the corrupted Service: the test proves nothing", f.Family)
		}
		if len(quarantined) != len(scenario.Protocols) {
			t.Errorf("%s: quarantined %v, want poison's %d ports", f.Family, quarantined, len(scenario.Protocols))
		}
		t.Run(string(f.Family), func(t *testing.T) { env.TrafficCases(t, f) })

		// A Service created later: one sync, no new refusal.
		refused := fi.refused
		late := scenario.Spec{Name: "late", Slot: 38, Endpoints: []scenario.EPSpec{{Pod: "pod-b"}}}
		w.Feed(late)
		if err := env.Node1.NS.Do(s.syncOnce); err != nil {
			t.Fatalf("%s: sync after the poison: %v", f.Family, err)
		}
		if fi.refused != refused {
			t.Errorf("%s: the unchanged poison was tried again (%d more refusals)", f.Family, fi.refused-refused)
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

// corruption is what a normalization bug would let through: nested source
// ranges (the kernel's interval set refuses them) for nftables, an
// unprintable prefix (iptables-restore refuses the line) for iptables.
func corruption(mode string, f scenario.Fam) func(*desired.ServicePort) {
	if mode == metrics.ModeNFTables {
		outer, inner := "10.0.0.0/8", "10.1.0.0/16"
		if f.V6 {
			outer, inner = "fd00:99::/32", "fd00:99:1::/48"
		}
		return func(sp *desired.ServicePort) {
			sp.AllowedSources = []netip.Prefix{netip.MustParsePrefix(outer), netip.MustParsePrefix(inner)}
		}
	}
	return func(sp *desired.ServicePort) { sp.AllowedSources = []netip.Prefix{{}} }
}

func backendFor(t *testing.T, env *scenario.Env, mode string, f scenario.Fam) Proxier {
	t.Helper()
	var p Proxier
	err := env.Node1.NS.Do(func() (err error) {
		if mode == metrics.ModeNFTables {
			p, err = nftables.New(f.Family)
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
