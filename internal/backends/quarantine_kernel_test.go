package backends

import (
	"context"
	"maps"
	"slices"
	"testing"

	"github.com/svcproxy/svcproxy/internal/config"
	"github.com/svcproxy/svcproxy/pkg/pipeline/syncer"
	"github.com/svcproxy/svcproxy/pkg/proxy"
	"github.com/svcproxy/svcproxy/pkg/testing/netnstest"
	"github.com/svcproxy/svcproxy/pkg/testing/netnstest/scenario"
	"github.com/svcproxy/svcproxy/pkg/testing/quarantinetest"
)

// TestKernelQuarantineEBPF runs the kernel quarantine cases in ebpf mode:
// its row opened in node1 as the daemon opens it, attached only to a
// cgroup the test creates (node1's pods' clients run in it), pinned only
// in a bpffs it mounts. The nftables half refuses the poison; the socket
// hooks must keep serving the healthy Services through the search and
// keep the poison out too.
func TestKernelQuarantineEBPF(t *testing.T) {
	netnstest.RequireKernel(t, "nft", "nsenter")
	row, err := Table.Lookup(proxy.ModeEBPF)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := row.Check(nil); err != nil {
		t.Fatalf("this kernel cannot run ebpf mode: %v", err)
	}
	m := quarantinetest.Mode{Mode: proxy.ModeEBPF, Start: func(t *testing.T) (*scenario.Env, quarantinetest.Open) {
		return startEBPF(t, row)
	}}
	for _, name := range slices.Sorted(maps.Keys(quarantinetest.Cases)) {
		t.Run(name, func(t *testing.T) { quarantinetest.Cases[name](t, m) })
	}
}

// startEBPF makes the scenario cluster with node1's pods in a throwaway
// cgroup, and returns it with what opens ebpf mode's row for one family
// in node1, as a new svcproxy process does (adopting what an earlier one
// pinned). The pins are removed at the end, as another mode's start does.
func startEBPF(t *testing.T, row *Backend) (*scenario.Env, quarantinetest.Open) {
	cgroup, pins := netnstest.ThrowawayCgroup(t, "svcproxy-quarantine-test"), netnstest.MountThrowaway(t, "bpf")
	cfg := &config.Config{Mode: proxy.ModeEBPF, BPFCgroupRoot: cgroup, BPFPinDir: pins}
	env := scenario.NewEnv(t)
	env.PodsInCgroup(cgroup)
	ctx := context.Background()
	t.Cleanup(func() {
		if err := row.RemoveLeftovers(ctx, cfg); err != nil {
			t.Errorf("removing ebpf mode's pins: %v", err)
		}
	})
	return env, func(t *testing.T, f scenario.Fam) syncer.Proxier {
		t.Helper()
		var p syncer.Proxier
		err := env.Node1.NS.Do(func() error {
			inst, err := row.Open(ctx, Env{Config: cfg, Families: []proxy.IPFamily{f.Family}})
			if err != nil {
				return err
			}
			t.Cleanup(inst.Close)
			p = inst.Proxiers[f.Family].Proxier
			return p.Init(ctx)
		})
		if err != nil {
			t.Fatalf("ebpf mode %s: %v", f.Family, err)
		}
		return p
	}
}
