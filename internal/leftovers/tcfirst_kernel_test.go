package leftovers

import (
	"context"
	"path/filepath"
	"slices"
	"testing"

	"github.com/svcproxy/svcproxy/internal/backends"
	"github.com/svcproxy/svcproxy/internal/config"
	"github.com/svcproxy/svcproxy/pkg/pipeline/backends/ebpf/nodeport"
	"github.com/svcproxy/svcproxy/pkg/pipeline/desired"
	"github.com/svcproxy/svcproxy/pkg/proxy"
	"github.com/svcproxy/svcproxy/pkg/testing/netnstest"
	"github.com/svcproxy/svcproxy/pkg/testing/netnstest/scenario"
)

// TestKernelTCTakesNoNewConnectionsBeforeAnyRemoval: with ebpf mode's tc
// programs left on node1 (both families' node ports, external and LB IPs
// in their frontends), a switch to iptables mode and --cleanup take every
// frontend from them before any mode's leftovers are removed: the
// programs see packets before the new mode's rules, and each connection
// they took until the removal reached ebpf mode's would be held by their
// drain instead of going to the new mode. Every other row's removal
// records how many frontends the programs still had when it began; the
// leftovers are then gone.
func TestKernelTCTakesNoNewConnectionsBeforeAnyRemoval(t *testing.T) {
	netnstest.RequireKernel(t, "nft", "nsenter")
	cgroup, pins := netnstest.ThrowawayCgroup(t, "svcproxy-leftovers-tc-test"), netnstest.MountThrowaway(t, "bpf")
	env := scenario.NewEnv(t)
	env.PodsInCgroup(cgroup)
	ebpfCfg := &config.Config{Mode: proxy.ModeEBPF, BPFCgroupRoot: cgroup, BPFPinDir: pins, BPFTCInterfaces: []string{"fab0"}}
	ctx := context.Background()
	for _, c := range []struct {
		what   string
		remove func(reg backends.Registry) error
	}{
		{"a switch to iptables mode", func(reg backends.Registry) error {
			return OtherModes(ctx, reg, proxy.ModeIPTables, &config.Config{Mode: proxy.ModeIPTables, BPFPinDir: pins})
		}},
		{"--cleanup", func(reg backends.Registry) error { return All(ctx, reg, &config.Config{BPFPinDir: pins}) }},
	} {
		leaveEBPFModeWithTC(t, env, ebpfCfg)
		reg, seen := frontendsAtEachRemoval(t, pins)
		if err := env.Node1.NS.Do(func() error { return c.remove(reg) }); err != nil {
			t.Fatalf("%s: %v", c.what, err)
		}
		if len(*seen) == 0 {
			t.Fatalf("%s removed no other mode's leftovers; the test observes nothing", c.what)
		}
		for _, s := range *seen {
			if s.frontends != 0 {
				t.Errorf("%s: when %s mode's leftovers went, the tc programs ebpf mode left still had %d frontends: they took new connections until the removal reached ebpf mode's", c.what, s.mode, s.frontends)
			}
		}
		if n, err := nodeport.Frontends(filepath.Join(pins, "tc")); err != nil || n != 0 {
			t.Errorf("%s: the tc programs' pins remain with %d frontends (%v)", c.what, n, err)
		}
	}
}

// leaveEBPFModeWithTC runs ebpf mode with cfg's tc programs on node1 for
// one full sync of both families' scenario Services and stops it as a
// stopped svcproxy does: the programs stay attached, pinned with their
// frontends.
func leaveEBPFModeWithTC(t *testing.T, env *scenario.Env, cfg *config.Config) {
	t.Helper()
	row, err := backends.Table.Lookup(proxy.ModeEBPF)
	if err != nil {
		t.Fatal(err)
	}
	var inst *backends.Instance
	err = env.Node1.NS.Do(func() (err error) {
		inst, err = row.Open(context.Background(), backends.Env{Config: cfg, Families: []proxy.IPFamily{proxy.IPv4, proxy.IPv6}})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	defer inst.Close()
	for _, f := range scenario.Families {
		st := env.NewWorld(f).Configure(func(o *desired.Options) { row.Decide(cfg, o) }).Apply(t, env.Services()...)
		p := inst.Proxiers[st.Family].Proxier
		err := env.Node1.NS.Do(func() error {
			if err := p.Init(context.Background()); err != nil {
				return err
			}
			return p.Sync(context.Background(), st, proxy.FullSync)
		})
		if err != nil {
			t.Fatalf("ebpf mode, %s: %v", st.Family, err)
		}
	}
	if n, err := nodeport.Frontends(filepath.Join(cfg.BPFPinDir, "tc")); err != nil || n == 0 {
		t.Fatalf("ebpf mode left the tc programs %d frontends (%v), want the Services'", n, err)
	}
}

// frontendSeen is how many frontends the tc programs held when mode's
// leftovers began to go.
type frontendSeen struct {
	mode      proxy.Mode
	frontends int
}

// frontendsAtEachRemoval is backends.Table whose rows, ebpf mode's
// aside, record in seen how many frontends the tc programs pinned under
// pins hold before they remove their leftovers.
func frontendsAtEachRemoval(t *testing.T, pins string) (backends.Registry, *[]frontendSeen) {
	seen := &[]frontendSeen{}
	reg := slices.Clone(backends.Table)
	for i := range reg {
		mode, remove := reg[i].Mode, reg[i].RemoveLeftovers
		if mode == proxy.ModeEBPF {
			continue
		}
		reg[i].RemoveLeftovers = func(ctx context.Context, cfg *config.Config) error {
			n, err := nodeport.Frontends(filepath.Join(pins, "tc"))
			if err != nil {
				t.Errorf("reading the tc programs' frontends before %s mode's removal: %v", mode, err)
			}
			*seen = append(*seen, frontendSeen{mode, n})
			return remove(ctx, cfg)
		}
	}
	return reg, seen
}
