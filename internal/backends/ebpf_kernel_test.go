package backends

import (
	"context"
	"fmt"
	"net/netip"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/svcproxy/svcproxy/internal/config"
	"github.com/svcproxy/svcproxy/pkg/netnstest"
	"github.com/svcproxy/svcproxy/pkg/netnstest/scenario"
	"github.com/svcproxy/svcproxy/pkg/proxy"
	"github.com/svcproxy/svcproxy/pkg/proxy/desired"
	"github.com/svcproxy/svcproxy/pkg/proxy/ebpf"
)

// TestKernelEBPFMode opens ebpf mode's row on node1 of the scenario
// cluster, attached only to a cgroup this test creates, pinned only in a
// bpffs it mounts, and syncs one State into both halves. Then: every
// scenario case passes from the pods and the outside client (processes
// outside the cgroup, so the nftables half: node ports, external and LB
// IPs from another namespace); with the nftables table deleted, a process
// in the cgroup still reaches a cluster IP (the hooks translated it at
// connect) while one outside does not, and the canary says so; another
// mode's removal of the leftovers in the configured pin directory detaches
// the hooks.
func TestKernelEBPFMode(t *testing.T) {
	netnstest.RequireKernel(t, "nft", "ip", "bash", "timeout")
	if _, err := ebpfBackend.Check(nil); err != nil {
		t.Fatalf("this kernel cannot run ebpf mode: %v", err)
	}
	cgroup, pins := netnstest.ThrowawayCgroup(t, "svcproxy-ebpfmode-test"), netnstest.MountThrowaway(t, "bpf")
	cfg := &config.Config{Mode: proxy.ModeEBPF, BPFCgroupRoot: cgroup, BPFPinDir: pins}
	env := scenario.NewEnv(t)
	ctx := context.Background()
	f := scenario.Families[0]
	var both *hooksAndRules
	err := env.Node1.NS.Do(func() error {
		inst, err := openEBPF(ctx, Env{Config: cfg, Families: []proxy.IPFamily{f.Family}})
		if err != nil {
			return err
		}
		t.Cleanup(inst.Close)
		both = inst.Proxiers[f.Family].Proxier.(*hooksAndRules)
		if inst.StaleFlows[f.Family].Table != both.hooks.Sockets() {
			t.Errorf("the row hands the conntrack cleanup %+v, want the hooks' sockets", inst.StaleFlows[f.Family])
		}
		return both.Init(ctx)
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Node1.NS.Do(func() error { return both.Cleanup(ctx) }) })
	w := env.NewWorld(f).Configure(func(o *desired.Options) { ebpfBackend.Decide(cfg, o) })
	st := w.Apply(t, env.Services()...)
	if err := env.Node1.NS.Do(func() error { return both.Sync(ctx, st, proxy.FullSync) }); err != nil {
		t.Fatal(err)
	}
	if s := both.hooks.Stats(); s == nil || s.Links != 4 || s.Entries["services"] == 0 || s.Capacity["backends"] == 0 {
		t.Errorf("after a sync the hooks' stats are %+v, want 4 links and entries", s)
	}
	// After a sync the row says the kernel holds every port, so that a
	// rejected sync after a restart searches without dropping them.
	var held map[proxy.ServicePortName]struct{}
	err = env.Node1.NS.Do(func() (err error) { held, err = both.HeldPorts(ctx, st); return err })
	if err != nil || len(held) != st.Services.Len() {
		t.Errorf("HeldPorts after a sync: %d of %d ports (err %v), want all", len(held), st.Services.Len(), err)
	}
	t.Run(string(f.Family), func(t *testing.T) { env.ReachableCases(t, f) })

	vip := netip.AddrPortFrom(f.ClusterIP(10), scenario.SvcPort) // "spread": pod-a, pod-b, pod-c, pod-r
	if out, err := askFromCgroup(env.Pods["pod-c"].NS, cgroup, vip); err != nil {
		t.Fatalf("a process in the cgroup could not reach %s: %v (%s)", vip, err, out)
	}
	if err := env.Node1.NS.Do(func() error { return exec.Command("nft", "delete", "table", "ip", "kube-proxy").Run() }); err != nil {
		t.Fatal(err)
	}
	if out, err := askFromCgroup(env.Pods["pod-c"].NS, cgroup, vip); err != nil {
		t.Errorf("without the nftables rules, a process in the cgroup could not reach %s: %v (%s)", vip, err, out)
	}
	outside := netnstest.Client{NS: env.Pods["pod-c"].NS, Timeout: time.Second}
	if ans, err := outside.Ask(proxy.TCP, vip); err == nil {
		t.Errorf("without the nftables rules, a process outside the cgroup reached %s (%s): the test proves nothing", vip, ans)
	}
	if missing, err := both.CanaryMissing(ctx); err != nil || !missing {
		t.Errorf("with the nftables table gone, CanaryMissing = %v, %v; want true", missing, err)
	}

	if present, err := ebpf.LeftoversPresent(pins); err != nil || !present {
		t.Fatalf("LeftoversPresent(%s) = %v, %v while the hooks are pinned", pins, present, err)
	}
	both.hooks.Close() // as a stopped svcproxy: only the pins hold the hooks
	// What another mode's start, or --cleanup, runs with --bpf-pin-dir.
	if err := ebpfBackend.RemoveLeftovers(ctx, &config.Config{Mode: proxy.ModeNFTables, BPFPinDir: pins}); err != nil {
		t.Fatal(err)
	}
	if present, err := ebpf.LeftoversPresent(pins); err != nil || present {
		t.Errorf("after removing the leftovers, LeftoversPresent = %v, %v", present, err)
	}
	if out, err := askFromCgroup(env.Pods["pod-c"].NS, cgroup, vip); err == nil {
		t.Errorf("after removing the leftovers a process in the cgroup still reached %s (%s)", vip, out)
	}
}

// askFromCgroup runs a process born in ns that moves itself into cgroup
// before it connects to dst over TCP, and returns the echo server's line.
func askFromCgroup(ns *netnstest.NS, cgroup string, dst netip.AddrPort) (string, error) {
	script := fmt.Sprintf(`echo $$ > %s/cgroup.procs && exec bash -c 'exec 3<>/dev/tcp/%s/%d && echo hi >&3 && head -n1 <&3'`,
		cgroup, dst.Addr(), dst.Port())
	out, err := exec.Command("timeout", "3", "ip", "netns", "exec", ns.Name, "sh", "-c", script).CombinedOutput()
	line := strings.TrimSpace(string(out))
	if err == nil && !strings.HasPrefix(line, "pod-") {
		err = fmt.Errorf("no echo answer")
	}
	return line, err
}
