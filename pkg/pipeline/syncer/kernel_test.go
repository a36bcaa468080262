package syncer_test

import (
	"context"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/svcproxy/svcproxy/pkg/kiptables"
	"github.com/svcproxy/svcproxy/pkg/pipeline/backends/iptables"
	"github.com/svcproxy/svcproxy/pkg/pipeline/backends/ipvs"
	"github.com/svcproxy/svcproxy/pkg/pipeline/backends/nftables"
	"github.com/svcproxy/svcproxy/pkg/pipeline/syncer"
	"github.com/svcproxy/svcproxy/pkg/proxy"
	"github.com/svcproxy/svcproxy/pkg/testing/netnstest"
	"github.com/svcproxy/svcproxy/pkg/testing/netnstest/scenario"
	"github.com/svcproxy/svcproxy/pkg/testing/quarantinetest"
)

var (
	_ syncer.PortHolder = (*nftables.Proxier)(nil)
	_ syncer.PortHolder = (*iptables.Proxier)(nil)
	_ syncer.PortHolder = (*ipvs.Proxier)(nil)
)

// TestKernelQuarantine runs the kernel quarantine cases (a Service whose
// rules the kernel refuses is found and kept out while every other Service
// answers real traffic, across syncs and restarts) over the backends that
// are one package each; ebpf mode's are internal/backends' tests.
func TestKernelQuarantine(t *testing.T) {
	netnstest.RequireKernel(t, "nft", "iptables-nft-restore", "ip6tables-nft-restore")
	for _, mode := range []proxy.Mode{proxy.ModeNFTables, proxy.ModeIPTables} {
		m := nativeMode(mode)
		for _, name := range slices.Sorted(maps.Keys(quarantinetest.Cases)) {
			t.Run(string(mode)+"/"+name, func(t *testing.T) { quarantinetest.Cases[name](t, m) })
		}
	}
}

func nativeMode(mode proxy.Mode) quarantinetest.Mode {
	return quarantinetest.Mode{Mode: mode, Start: func(t *testing.T) (*scenario.Env, quarantinetest.Open) {
		env := scenario.NewEnv(t)
		return env, func(t *testing.T, f scenario.Fam) syncer.Proxier { return backendFor(t, env, mode, f) }
	}}
}

func backendFor(t *testing.T, env *scenario.Env, mode proxy.Mode, f scenario.Fam) syncer.Proxier {
	t.Helper()
	var p syncer.Proxier
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
