package nftables_test

import (
	"net/netip"
	"testing"

	"github.com/svcproxy/svcproxy/pkg/pipeline/desired"
	"github.com/svcproxy/svcproxy/pkg/proxy"
	"github.com/svcproxy/svcproxy/pkg/testing/netnstest/scenario"
)

// TestKernelSourceRangesReplaced: a Service's source range widened or
// narrowed to one that overlaps the old one, in an incremental sync and at
// a restart over the old table. The allow sets are interval sets: the
// kernel refuses an element overlapping one still there ("File exists"),
// so the old element must go before the new one comes (found by
// proxytest/hostile.TestKernelCorpus, restarting over another input's
// table).
func TestKernelSourceRangesReplaced(t *testing.T) {
	requireKernel(t)
	env := scenario.NewEnv(t)
	for _, f := range scenario.Families {
		t.Run(string(f.Family), func(t *testing.T) {
			st := env.NewWorld(f).Apply(t, env.Services()...)
			name, sp := firewalled(t, st)
			narrow := sp.AllowedSources[0]
			wide := netip.PrefixFrom(narrow.Addr(), narrow.Bits()/2).Masked()
			p := newProxier(t, env, f)
			syncIn(t, env, p, st)
			for _, ranges := range [][]netip.Prefix{{wide}, {narrow}, {wide}} {
				st = withSources(st, name, ranges)
				syncIn(t, env, p, st) // incremental
			}
			restarted := newProxier(t, env, f)
			full := withSources(st, name, []netip.Prefix{narrow})
			full.Changed = nil
			syncIn(t, env, restarted, full)
		})
	}
}

func firewalled(t *testing.T, st *desired.State) (proxy.ServicePortName, *desired.ServicePort) {
	t.Helper()
	for name, sp := range st.Services.All() {
		if len(sp.AllowedSources) > 0 && sp.AllowedSources[0].Bits() >= 16 {
			return name, sp
		}
	}
	t.Fatal("no service port with source ranges in the scenario")
	return proxy.ServicePortName{}, nil
}

// withSources is st with name's allowed sources replaced, as the only change.
func withSources(st *desired.State, name proxy.ServicePortName, ranges []netip.Prefix) *desired.State {
	next := *st
	next.Services = st.Services
	sp := *st.Service(name)
	sp.AllowedSources = ranges
	next.Services = next.Services.With(name, &sp)
	next.Changed = map[proxy.ServicePortName]struct{}{name: {}}
	return &next
}
