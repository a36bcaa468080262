package nftables_test

import (
	"context"
	"fmt"
	"net/netip"
	"testing"
	"time"

	"github.com/svcproxy/svcproxy/pkg/kconntrack"
	"github.com/svcproxy/svcproxy/pkg/proxy"
	"github.com/svcproxy/svcproxy/pkg/testing/netnstest"
	"github.com/svcproxy/svcproxy/pkg/testing/netnstest/scenario"
)

// TestKernelServiceCIDRs: with the service ranges known, a new connection
// to an address of them that no Service holds is dropped in the node
// (never forwarded: its conntrack entry is never confirmed), while
// Services keep answering; without them the same packet is forwarded
// (the node routes the service range, as a real node's default route).
func TestKernelServiceCIDRs(t *testing.T) {
	requireKernel(t)
	env := scenario.NewEnv(t)
	for _, f := range scenario.Families {
		t.Run(string(f.Family), func(t *testing.T) {
			p := newProxier(t, env, f)
			st := env.NewWorld(f).Apply(t, env.Services()...)
			cidr := f.Pick([2]netip.Addr{netnstest.ServiceCIDRv4.Addr(), netnstest.ServiceCIDRv6.Addr()})
			bits := map[bool]int{false: netnstest.ServiceCIDRv4.Bits(), true: netnstest.ServiceCIDRv6.Bits()}[f.V6]
			for _, tc := range []struct {
				cidrs     []netip.Prefix
				slot      int // an address no Service holds, one per case (conntrack entries stay)
				forwarded bool
			}{
				{nil, 250, true},
				{[]netip.Prefix{netip.PrefixFrom(cidr, bits)}, 251, false},
			} {
				unallocated := netip.AddrPortFrom(f.ClusterIP(tc.slot), scenario.SvcPort)
				next := *st
				next.ServiceCIDRs, next.Changed = tc.cidrs, nil
				syncIn(t, env, p, &next)
				scenario.AskMany(t, env.FromClient(f), proxy.TCP, netip.AddrPortFrom(f.ClusterIP(10), scenario.SvcPort), 2)
				c := env.FromClient(f)
				c.Timeout = 300 * time.Millisecond
				if _, err := c.Ask(proxy.UDP, unallocated); err == nil {
					t.Fatalf("service CIDRs %v: %s answered", tc.cidrs, unallocated)
				}
				if got := confirmed(t, env, f.Family, unallocated.Addr()); got != tc.forwarded {
					t.Errorf("service CIDRs %v: UDP to %s forwarded (conntrack entry confirmed) = %v, want %v", tc.cidrs, unallocated, got, tc.forwarded)
				}
				// nft lists a one-element set as a plain match: the
				// restart must still see its own rule.
				t.Run(fmt.Sprintf("RestartRewritesNothing/%d", len(tc.cidrs)), func(t *testing.T) { restartRewritesNothing(t, env, f, &next) })
			}
		})
	}
}

// confirmed reports whether node1's conntrack table holds a UDP flow to dst
// (an entry is confirmed only when its first packet leaves the node).
func confirmed(t *testing.T, env *scenario.Env, family proxy.IPFamily, dst netip.Addr) bool {
	t.Helper()
	found := false
	err := env.Node1.NS.Do(func() error {
		c, err := kconntrack.New()
		if err != nil {
			return err
		}
		defer c.Close()
		return c.List(context.Background(), family, func(fl kconntrack.Flow) {
			found = found || fl.Orig.Dst.Addr() == dst
		})
	})
	if err != nil {
		t.Fatalf("listing conntrack: %v", err)
	}
	return found
}
