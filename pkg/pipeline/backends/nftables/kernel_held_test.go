package nftables_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/svcproxy/svcproxy/pkg/pipeline/backends/nftables"
	"github.com/svcproxy/svcproxy/pkg/pipeline/desired"
	"github.com/svcproxy/svcproxy/pkg/proxy"
	"github.com/svcproxy/svcproxy/pkg/testing/netnstest/scenario"
)

// TestKernelHeldPorts: once every scenario Service (the hostile ones too)
// is programmed into a real kernel, a new Proxier's HeldPorts finds every
// port held, and not one whose endpoints changed; with the shared chains
// and with chains of their own for ports with several external frontends.
func TestKernelHeldPorts(t *testing.T) {
	requireKernel(t)
	env := scenario.NewEnv(t)
	for _, own := range []bool{false, true} {
		proxier := func(f scenario.Fam) *nftables.Proxier {
			p := newProxier(t, env, f)
			if own {
				nftables.SetOwnSlots(p, 0)
			}
			return p
		}
		for _, f := range scenario.Families {
			st := env.NewWorld(f).Apply(t, append(env.Services(), env.HostileServices()...)...)
			syncIn(t, env, proxier(f), st)
			t.Run(fmt.Sprintf("ownChains=%t/%s", own, f.Family), func(t *testing.T) {
				env.HeldCases(t, st, func(st *desired.State) (held map[proxy.ServicePortName]struct{}, err error) {
					p := proxier(f)
					err = env.Node1.NS.Do(func() (err error) {
						held, err = p.HeldPorts(context.Background(), st)
						return err
					})
					return held, err
				})
			})
		}
	}
}
