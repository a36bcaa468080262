package iptables_test

import (
	"context"
	"testing"

	"github.com/svcproxy/svcproxy/pkg/pipeline/backends/iptables"
	"github.com/svcproxy/svcproxy/pkg/pipeline/desired"
	"github.com/svcproxy/svcproxy/pkg/proxy"
	"github.com/svcproxy/svcproxy/pkg/testing/netnstest/scenario"
)

// TestKernelHeldPorts: once every scenario Service (the hostile ones too)
// is programmed with either flavour, a new Proxier's HeldPorts finds every
// port held, and not one whose endpoints changed: the rules read back by
// the real iptables-save compare equal to the rendered ones.
func TestKernelHeldPorts(t *testing.T) {
	requireKernel(t)
	for _, fl := range flavours {
		t.Run(string(fl), func(t *testing.T) {
			k := &kernel{env: scenario.NewEnv(t), flavour: fl, proxiers: map[proxy.IPFamily]*iptables.Proxier{}}
			for _, f := range scenario.Families {
				st := k.env.NewWorld(f).Apply(t, append(k.env.Services(), k.env.HostileServices()...)...)
				k.sync(t, k.newProxier(t, f.Family), st)
				t.Run(string(f.Family), func(t *testing.T) {
					k.env.HeldCases(t, st, func(st *desired.State) (held map[proxy.ServicePortName]struct{}, err error) {
						p := k.newProxier(t, f.Family)
						err = k.env.Node1.NS.Do(func() (err error) {
							held, err = p.HeldPorts(context.Background(), st)
							return err
						})
						return held, err
					})
				})
			}
		})
	}
}
