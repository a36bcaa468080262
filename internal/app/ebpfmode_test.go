package app

import (
	"context"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/svcproxy/svcproxy/internal/backends"
	"github.com/svcproxy/svcproxy/internal/config"
	"github.com/svcproxy/svcproxy/internal/explain"
	"github.com/svcproxy/svcproxy/pkg/kconntrack"
	"github.com/svcproxy/svcproxy/pkg/pipeline/desired"
	"github.com/svcproxy/svcproxy/pkg/pipeline/syncer"
	"github.com/svcproxy/svcproxy/pkg/proxy"
)

// TestEBPFModeSelected: --proxy-mode=ebpf and mode: ebpf select ebpf
// mode's row, with the extension flags and the nftables section's
// defaults (its node ports are nftables'); the row's decisions reach the
// State through the app's syncers, and explain names both halves from
// that State: the socket hooks' map entries and the nftables objects.
// Opening the row touches the kernel (pkg/pipeline/backends/ebpf's kernel tests and
// TestKernelEBPFMode cover it); here a recording Proxier stands in for it.
func TestEBPFModeSelected(t *testing.T) {
	cfg := mustRun(t, "--hostname-override=n1", "--proxy-mode=ebpf", "--state-socket=",
		"--bpf-cgroup-root=/sys/fs/cgroup/pods", "--bpf-pin-dir=/sys/fs/bpf/test", "--bpf-socket-entries=1024")
	if cfg.Mode != proxy.ModeEBPF || cfg.BPFCgroupRoot != "/sys/fs/cgroup/pods" || cfg.BPFPinDir != "/sys/fs/bpf/test" || cfg.BPFSocketEntries != 1024 {
		t.Fatalf("flags gave mode %q, cgroup %q, pin dir %q, socket entries %d", cfg.Mode, cfg.BPFCgroupRoot, cfg.BPFPinDir, cfg.BPFSocketEntries)
	}
	if cfg.BPFTCInterfaces != nil {
		t.Errorf("the tc programs are on by default: interfaces %q", cfg.BPFTCInterfaces)
	}
	if tc := mustRun(t, "--hostname-override=n1", "--proxy-mode=ebpf", "--bpf-tc-interfaces=eth0,eth1"); !slices.Equal(tc.BPFTCInterfaces, []string{"eth0", "eth1"}) {
		t.Errorf("--bpf-tc-interfaces=eth0,eth1 gave %q", tc.BPFTCInterfaces)
	}
	if cfg.BPFAcceleration != "" {
		t.Errorf("XDP acceleration is on by default: %q", cfg.BPFAcceleration)
	}
	if x := mustRun(t, "--hostname-override=n1", "--proxy-mode=ebpf", "--bpf-tc-interfaces=eth0", "--bpf-acceleration=best-effort"); x.BPFAcceleration != "best-effort" {
		t.Errorf("--bpf-acceleration=best-effort gave %q", x.BPFAcceleration)
	}
	file := mustRun(t, "--config", writeFile(t, "c.yaml", configHeader+"mode: ebpf\nhostnameOverride: n1\n"))
	if file.Mode != proxy.ModeEBPF || !slices.Equal(file.NodePortAddresses, []string{"primary"}) {
		t.Errorf("mode: ebpf gave mode %q, nodePortAddresses %q; want ebpf, [primary] (nftables')", file.Mode, file.NodePortAddresses)
	}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	st := syncEBPFRow(ctx, t, cfg)
	if !testBackend(t, proxy.ModeEBPF).Options(cfg, proxy.IPv4).DropUnallocated {
		t.Error("ebpf mode's State does not drop unallocated ServiceCIDR addresses, as nftables mode's does")
	}
	e := explain.Explain(st, explain.Packet{Protocol: proxy.TCP, Dest: netip.MustParseAddr("10.96.0.10"), Port: 80})
	objs, err := kernelObjects(ctx, backends.Table, proxy.ModeEBPF, st, e)
	if err != nil {
		t.Fatal(err)
	}
	text := strings.Join(objs, "\n")
	for _, want := range []string{"bpf map ipv4/services: 10.96.0.10:80/TCP", "bpf map ipv4/backends: group", "→ 10.0.1.2:8080",
		"table ip kube-proxy: map service-ips element { 10.96.0.10 . tcp . 80"} {
		if !strings.Contains(text, want) {
			t.Errorf("explain's objects lack %q:\n%s", want, text)
		}
	}
}

// syncEBPFRow runs ebpf mode's row, its Open replaced by a recording
// Proxier, through the app's syncers, and returns the IPv4 State synced.
func syncEBPFRow(ctx context.Context, t *testing.T, cfg *config.Config) *desired.State {
	t.Helper()
	row := *testBackend(t, proxy.ModeEBPF)
	p := &rowProxier{synced: map[proxy.IPFamily]*desired.State{}}
	row.Open = func(_ context.Context, env backends.Env) (*backends.Instance, error) {
		inst := &backends.Instance{Proxiers: map[proxy.IPFamily]syncer.Backend{}}
		for _, f := range env.Families {
			inst.Proxiers[f] = syncer.Backend{Proxier: p}
		}
		return inst, nil
	}
	row.SyncFailures = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "x", Help: "x"}, []string{"ip_family"})
	d := rowDaemon(t, cfg, backends.Registry{row})
	families, feed, inst := openRow(ctx, t, d)
	syncers, err := d.newSyncers(ctx, inst, feed, &kconntrack.Fake{}, newFirstSyncs(families))
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range syncers {
		go s.Loop(ctx)
	}
	web := proxy.ServicePortName{ServiceName: proxy.ServiceName{Namespace: "ns", Name: "web"}, Port: "http", Protocol: proxy.TCP}
	eventually(t, "IPv4 synced with ns/web", func() bool {
		st := p.lastSync(proxy.IPv4)
		return st != nil && st.Service(web) != nil
	})
	return p.lastSync(proxy.IPv4)
}
