//go:build ipvsvm

// Mode switches to and from IPVS mode. Built only with -tags ipvsvm, into
// the test binary hack/ipvs-vm.sh boots in its qemu VM (this kernel has no
// IPVS); inside the VM nothing is skipped.

package leftovers

import (
	"context"
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/svcproxy/svcproxy/internal/backends"
	"github.com/svcproxy/svcproxy/pkg/kiptables"
	"github.com/svcproxy/svcproxy/pkg/kipvs"
	"github.com/svcproxy/svcproxy/pkg/pipeline/backends/iptables"
	"github.com/svcproxy/svcproxy/pkg/pipeline/backends/ipvs"
	"github.com/svcproxy/svcproxy/pkg/pipeline/backends/nftables"
	"github.com/svcproxy/svcproxy/pkg/pipeline/desired"
	"github.com/svcproxy/svcproxy/pkg/proxy"
	"github.com/svcproxy/svcproxy/pkg/testing/netnstest/scenario"
)

// TestVMModeSwitch switches node1 between IPVS mode and each other mode and
// back, as the daemon does it (internal/app: the new mode's first sync of
// both families, then OtherModes): clients connecting all the time to
// cluster IPs of both families over TCP and UDP and to a node port never
// fail, and after each switch the old mode's objects are gone where
// OtherModes removes them (iptables ↔ IPVS leftovers stay, as upstream's).
func TestVMModeSwitch(t *testing.T) {
	for _, other := range []proxy.Mode{proxy.ModeNFTables, proxy.ModeIPTables} {
		t.Run(fmt.Sprintf("%s-ipvs-%s", other, other), func(t *testing.T) {
			env := scenario.NewEnv(t)
			sw := &modeSwitch{env: env}
			sw.to(t, other)
			loads := sw.startLoads(t)
			sw.to(t, proxy.ModeIPVS)
			sw.to(t, other)
			time.Sleep(time.Second)
			for what, l := range loads {
				res := l.Stop()
				t.Logf("%s: %d requests answered, %d failed", what, res.Answered, len(res.Failures))
				if len(res.Failures) > 0 {
					t.Errorf("%s across the switches: %d failures: %v", what, len(res.Failures), res.Failures)
				}
			}
		})
	}
}

// backend is what a mode's Proxier offers (syncer.Proxier's methods used here).
type backend interface {
	Init(ctx context.Context) error
	Sync(ctx context.Context, st *desired.State, mode proxy.SyncMode) error
}

type modeSwitch struct {
	env  *scenario.Env
	mode proxy.Mode
	// closers stop the previous mode's Proxiers (the old process exits).
	closers []func()
}

// switchServices are the Services programmed in every mode: spread has a
// node port, external and LB IPs; sticky has ClientIP affinity.
func (sw *modeSwitch) services(t *testing.T) []scenario.Spec {
	return []scenario.Spec{sw.env.ServiceNamed(t, "spread"), sw.env.ServiceNamed(t, "sticky")}
}

// to starts mode: a Proxier per family whose first sync programs the
// Services (a RecoverySync, as the syncer's first), then the old mode's
// leftovers go, and the kernel is checked.
func (sw *modeSwitch) to(t *testing.T, mode proxy.Mode) {
	t.Helper()
	old := sw.mode
	for _, c := range sw.closers {
		c()
	}
	sw.closers = nil
	start := time.Now()
	for _, f := range scenario.Families {
		w := sw.env.NewWorld(f).Configure(modeOptions(mode))
		st := w.Apply(t, sw.services(t)...)
		err := sw.env.Node1.NS.Do(func() error {
			p, err := sw.newBackend(mode, f.Family)
			if err != nil {
				return err
			}
			if err := p.Init(context.Background()); err != nil {
				return err
			}
			return p.Sync(context.Background(), st, proxy.RecoverySync)
		})
		if err != nil {
			t.Fatalf("%s → %s: %s first sync: %v", old, mode, f.Family, err)
		}
	}
	synced := time.Since(start)
	if err := sw.env.Node1.NS.Do(func() error { return OtherModes(context.Background(), backends.Table, mode, nil) }); err != nil {
		t.Errorf("%s → %s: OtherModes: %v", old, mode, err)
	}
	t.Logf("%s → %s: both families synced after %v, other modes cleaned up after %v", old, mode,
		synced.Round(time.Millisecond), time.Since(start).Round(time.Millisecond))
	sw.mode = mode
	sw.checkLeftovers(t, old)
}

func (sw *modeSwitch) newBackend(mode proxy.Mode, family proxy.IPFamily) (backend, error) {
	switch mode {
	case proxy.ModeNFTables:
		return nftables.New(family, nftables.Options{})
	case proxy.ModeIPVS:
		p, err := ipvs.New(family, ipvs.Options{ReapInterval: -1, Flavour: kiptables.FlavourNFT})
		if err == nil {
			sw.closers = append(sw.closers, p.Close)
		}
		return p, err
	}
	return iptables.New(context.Background(), family, iptables.Options{Flavour: kiptables.FlavourNFT, SyncPeriod: 30 * time.Second})
}

// modeOptions are the Compute options a mode adds (internal/app).
func modeOptions(mode proxy.Mode) func(*desired.Options) {
	return func(o *desired.Options) {
		if mode == proxy.ModeIPVS {
			o.BindNodePorts = true
			o.PortSettings = ipvs.NewScheduling(kipvs.RoundRobin)
		}
	}
}

// startLoads connects from the outside client all the time: spread's
// cluster IP over TCP (both families) and UDP, and its TCP node port.
func (sw *modeSwitch) startLoads(t *testing.T) map[string]*scenario.Load {
	loads := map[string]*scenario.Load{}
	for _, f := range scenario.Families {
		dst := netip.AddrPortFrom(f.ClusterIP(10), scenario.SvcPort)
		loads["TCP "+dst.String()] = scenario.StartLoad(sw.env.FromClient(f), proxy.TCP, dst, 50*time.Millisecond)
	}
	v4 := scenario.Families[0]
	udp := netip.AddrPortFrom(v4.ClusterIP(10), scenario.SvcPort)
	loads["UDP "+udp.String()] = scenario.StartLoad(sw.env.FromClient(v4), proxy.UDP, udp, 50*time.Millisecond)
	np := netip.AddrPortFrom(sw.env.Node1.IPv4, 30010)
	loads["TCP node port "+np.String()] = scenario.StartLoad(sw.env.FromClient(v4), proxy.TCP, np, 50*time.Millisecond)
	// Each has an answer before the first switch (seconds under TCG on a
	// busy host).
	for what, l := range loads {
		for deadline := time.Now().Add(30 * time.Second); l.Answered() == 0; time.Sleep(100 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("%s: no answer in %s mode before any switch: %v", what, sw.mode, l.Stop().Failures)
			}
		}
	}
	return loads
}

// checkLeftovers checks what OtherModes promises for the mode now running:
// nftables mode leaves nothing of IPVS mode (virtual servers, kube-ipvs0,
// ipsets, iptables chains); IPVS and iptables modes leave no nftables
// table. It logs what stays by design (iptables ↔ IPVS).
func (sw *modeSwitch) checkLeftovers(t *testing.T, old proxy.Mode) {
	t.Helper()
	ns := sw.env.Node1.NS
	tables, err := ns.ListTables(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	hasTables := strings.Contains(strings.Join(tables, "\n"), "kube-proxy")
	if hasTables != (sw.mode == proxy.ModeNFTables) {
		t.Errorf("%s → %s: nftables tables %q", old, sw.mode, tables)
	}
	var ipvsLeft bool
	var what string
	if err := ns.Do(func() (err error) { ipvsLeft, what, err = ipvs.LeftoversPresent(); return err }); err != nil {
		t.Fatal(err)
	}
	vs := sw.virtualServers(t)
	switch {
	case sw.mode == proxy.ModeIPVS && (!ipvsLeft || vs == 0):
		t.Errorf("%s → %s: IPVS mode's objects missing (leftovers %v, %d virtual servers)", old, sw.mode, what, vs)
	case sw.mode == proxy.ModeNFTables && (ipvsLeft || vs > 0):
		t.Errorf("%s → %s: IPVS leftovers %q, %d virtual servers", old, sw.mode, what, vs)
	case sw.mode == proxy.ModeIPTables && ipvsLeft:
		t.Logf("%s → %s: IPVS leftovers stay (as upstream): %s, %d virtual servers", old, sw.mode, what, vs)
	}
	if sw.mode != proxy.ModeNFTables {
		return
	}
	for _, save := range []string{"iptables-nft-save", "ip6tables-nft-save", "iptables-legacy-save", "ip6tables-legacy-save"} {
		out, err := ns.Run(context.Background(), save)
		if err != nil {
			t.Fatalf("%s: %v", save, err)
		}
		if strings.Contains(string(out), ":KUBE-") {
			t.Errorf("%s → %s: %s lists KUBE- chains:\n%s", old, sw.mode, save, out)
		}
	}
}

func (sw *modeSwitch) virtualServers(t *testing.T) int {
	t.Helper()
	c, err := kipvs.New(sw.env.Node1.NS.Path())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	svcs, err := c.ListServices()
	if err != nil {
		t.Fatal(err)
	}
	return len(svcs)
}
