package nftables_test

import (
	"fmt"
	"net/netip"
	"os/exec"
	"slices"
	"testing"

	"github.com/svcproxy/svcproxy/pkg/proxy"
	"github.com/svcproxy/svcproxy/pkg/testing/netnstest/scenario"
)

// TestKernelEndpointCounts scales one Service through endpoint counts that
// appear for the first time after the first sync (2, then 3, 5 and 1, then
// 3 again after its objects were deleted) in a real kernel: nft 1.0.6
// refuses a rule that reads a numgen map created by an earlier
// transaction, so each count's dispatch chain must come with its own map.
// Every step must reach every endpoint through the cluster IP, the
// external IP and the node port.
func TestKernelEndpointCounts(t *testing.T) {
	requireKernel(t)
	env := scenario.NewEnv(t)
	pod, err := env.Node1.AddPod("pod-d")
	if err != nil {
		t.Fatal(err)
	}
	for _, proto := range scenario.Protocols {
		if _, err := pod.NS.Serve("pod-d", proto, scenario.PodPort); err != nil {
			t.Fatal(err)
		}
	}
	env.Pods["pod-d"] = pod
	order := []string{"pod-a", "pod-r", "pod-b", "pod-d", "pod-c"} // a remote one among the first two
	endpoints := func(n int) []scenario.EPSpec { return podEndpoints(order[:n]...) }
	for _, f := range scenario.Families {
		t.Run(string(f.Family), func(t *testing.T) {
			w := env.NewWorld(f)
			p := newProxier(t, env, f)
			spec := scenario.Spec{Name: "scaled", Slot: 40, NodePort: 30100, External: true, Endpoints: endpoints(2)}
			syncIn(t, env, p, w.Apply(t, spec))
			reachesExactly(t, env, f, spec)
			for _, n := range []int{3, 5, 1, 3} {
				spec.Endpoints = endpoints(n)
				st := w.Apply(t, spec)
				if st.Changed == nil {
					t.Fatal("expected an incremental State (Changed set), got a full one")
				}
				syncIn(t, env, p, st)
				flushConntrack(t, env)
				reachesExactly(t, env, f, spec)
			}
			cleanupIn(t, env, p)
		})
	}
}

// flushConntrack forgets node1's flows, so that UDP answers show what the
// rules do now, not the flows the previous step left (clearing stale flows
// after an endpoint change is internal/conntrack's job, not this backend's).
func flushConntrack(t *testing.T, env *scenario.Env) {
	t.Helper()
	err := env.Node1.NS.Do(func() error {
		out, err := exec.Command("conntrack", "-F").CombinedOutput()
		if err != nil {
			return fmt.Errorf("conntrack -F: %w: %s", err, out)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// reachesExactly asserts that TCP and UDP connections through each frontend
// of spec reach exactly its endpoints. 60 draws over at most 5 endpoints
// miss one with probability < 1e-5.
func reachesExactly(t *testing.T, env *scenario.Env, f scenario.Fam, spec scenario.Spec) {
	t.Helper()
	var want []string
	for _, ep := range spec.Endpoints {
		want = append(want, ep.Pod)
	}
	slices.Sort(want)
	for i, proto := range []proxy.Protocol{proxy.TCP, proxy.UDP} {
		for _, dst := range []netip.AddrPort{
			netip.AddrPortFrom(f.ClusterIP(spec.Slot), scenario.SvcPort),
			netip.AddrPortFrom(f.ExternalIP(spec.Slot), scenario.SvcPort),
			netip.AddrPortFrom(env.Node1.IP(f.V6), uint16(int(spec.NodePort)+i)),
		} {
			if got := scenario.Servers(scenario.AskMany(t, env.FromClient(f), proto, dst, 60)); !slices.Equal(got, want) {
				t.Errorf("%d endpoints: %s to %s reached %v, want %v", len(want), proto, dst, got, want)
			}
		}
	}
}
