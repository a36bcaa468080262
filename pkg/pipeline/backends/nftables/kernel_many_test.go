package nftables_test

import (
	"context"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/svcproxy/svcproxy/pkg/pipeline/backends/nftables"
	"github.com/svcproxy/svcproxy/pkg/proxy"
	"github.com/svcproxy/svcproxy/pkg/testing/netnstest/scenario"
)

// TestKernelManyExternalIPs: a Service with four external IPs and an LB IP
// (chains of its own, inline endpoint maps, whatever the threshold) spreads the connections to
// each of them over all its endpoints, for TCP, UDP and SCTP, and keeps
// doing so as endpoints are removed and added (each change rewrites its
// chain). Its eTP=Local twin sends external clients to the local
// endpoints only and a pod to all of them (the short-circuit).
func TestKernelManyExternalIPs(t *testing.T) {
	requireKernel(t)
	env := scenario.NewEnv(t)
	for _, f := range scenario.Families {
		t.Run(string(f.Family), func(t *testing.T) {
			w := env.NewWorld(f)
			p := newProxier(t, env, f)
			// Five frontends × 3 endpoints are below the default
			// threshold; the shape is what is tested here.
			nftables.SetOwnSlots(p, 0)
			wide := scenario.Spec{Name: "wide", Slot: 50, NodePort: 30200, External: true, MoreExternal: []int{51, 52, 53},
				LB: true, Endpoints: podEndpoints("pod-a", "pod-b", "pod-r")}
			local := scenario.Spec{Name: "wide-local", Slot: 55, NodePort: 30210, External: true, MoreExternal: []int{56},
				LB: true, ETPLocal: true, Endpoints: podEndpoints("pod-a", "pod-b", "pod-r")}
			syncIn(t, env, p, w.Apply(t, wide, local))
			if ruleset, err := env.Node1.NS.ListRuleset(context.Background()); err != nil || !strings.Contains(ruleset, "chain external-") ||
				!strings.Contains(ruleset, "/wide/tcp/tcp") || !strings.Contains(ruleset, "/wide-local/udp/udp") {
				t.Fatalf("no chains of their own (err %v):\n%s", err, ruleset)
			}
			spreadsOverAll(t, env, f, wide)
			for _, pods := range [][]string{{"pod-a", "pod-r"}, {"pod-a", "pod-b", "pod-c", "pod-r"}} {
				wide.Endpoints = podEndpoints(pods...)
				st := w.Apply(t, wide)
				if st.Changed == nil {
					t.Fatal("expected an incremental State (Changed set), got a full one")
				}
				syncIn(t, env, p, st)
				flushConntrack(t, env)
				spreadsOverAll(t, env, f, wide)
			}
			for _, dst := range externalFrontends(f, local) {
				want := []string{"pod-a", "pod-b"}
				if got := scenario.Servers(scenario.AskMany(t, env.FromClient(f), proxy.TCP, dst, 40)); !slices.Equal(got, want) {
					t.Errorf("eTP=Local: client to %s reached %v, want the local %v", dst, got, want)
				}
				want = []string{"pod-a", "pod-b", "pod-r"}
				if got := scenario.Servers(scenario.AskMany(t, env.FromPod("pod-c"), proxy.TCP, dst, 60)); !slices.Equal(got, want) {
					t.Errorf("eTP=Local: pod-c to %s reached %v, want all of %v", dst, got, want)
				}
			}
			cleanupIn(t, env, p)
		})
	}
}

// externalFrontends are spec's external and LB IPs, port SvcPort.
func externalFrontends(f scenario.Fam, spec scenario.Spec) []netip.AddrPort {
	out := []netip.AddrPort{netip.AddrPortFrom(f.ExternalIP(spec.Slot), scenario.SvcPort),
		netip.AddrPortFrom(f.LBIP(spec.Slot), scenario.SvcPort)}
	for _, n := range spec.MoreExternal {
		out = append(out, netip.AddrPortFrom(f.ExternalIP(n), scenario.SvcPort))
	}
	return out
}

// spreadsOverAll asserts that connections from the outside client to each
// external and LB IP of spec reach exactly its endpoints, each a fair
// share: 20 per endpoint on average, at least 5 (a binomial draw of 20·k
// at p = 1/k falls under 5 with probability < 1e-4).
func spreadsOverAll(t *testing.T, env *scenario.Env, f scenario.Fam, spec scenario.Spec) {
	t.Helper()
	var want []string
	for _, ep := range spec.Endpoints {
		want = append(want, ep.Pod)
	}
	slices.Sort(want)
	for i, dst := range externalFrontends(f, spec) {
		// Every protocol on the first frontend, TCP and UDP in turn on
		// the others (SCTP associations are slow to set up).
		protos := []proxy.Protocol{[]proxy.Protocol{proxy.TCP, proxy.UDP}[i%2]}
		if i == 0 {
			protos = scenario.Protocols
		}
		for _, proto := range protos {
			seen := scenario.AskMany(t, env.FromClient(f), proto, dst, 20*len(want))
			if got := scenario.Servers(seen); !slices.Equal(got, want) {
				t.Errorf("%d endpoints: %s to %s reached %v, want %v", len(want), proto, dst, got, want)
				continue
			}
			for _, pod := range want {
				if seen[pod] < 5 {
					t.Errorf("%d endpoints: %s to %s: %s got %d of %d (%v)", len(want), proto, dst, pod, seen[pod], 20*len(want), seen)
				}
			}
		}
	}
}

// podEndpoints are the named pods as endpoints.
func podEndpoints(pods ...string) []scenario.EPSpec {
	var out []scenario.EPSpec
	for _, p := range pods {
		out = append(out, scenario.EPSpec{Pod: p})
	}
	return out
}

// cleanupIn runs p's Cleanup inside the node namespace.
func cleanupIn(t *testing.T, env *scenario.Env, p *nftables.Proxier) {
	t.Helper()
	if err := env.Node1.NS.Do(func() error { return p.Cleanup(context.Background()) }); err != nil {
		t.Errorf("cleanup: %v", err)
	}
}
