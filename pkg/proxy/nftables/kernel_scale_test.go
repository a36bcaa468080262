package nftables_test

import (
	"context"
	"fmt"
	"net/netip"
	"os/exec"
	"slices"
	"testing"

	"github.com/svcproxy/svcproxy/pkg/proxy"
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
	env := newKernelEnv(t)
	pod, err := env.node1.AddPod("pod-d")
	if err != nil {
		t.Fatal(err)
	}
	for _, proto := range protocols {
		if _, err := pod.NS.Serve("pod-d", proto, podPort); err != nil {
			t.Fatal(err)
		}
	}
	env.pods["pod-d"] = pod
	order := []string{"pod-a", "pod-r", "pod-b", "pod-d", "pod-c"} // a remote one among the first two
	endpoints := func(n int) []epSpec {
		var eps []epSpec
		for _, name := range order[:n] {
			eps = append(eps, epSpec{pod: name})
		}
		return eps
	}
	for _, f := range families {
		t.Run(string(f.family), func(t *testing.T) {
			w := env.newWorld(f)
			p := env.newProxier(t, f)
			spec := svcSpec{name: "scaled", ip: 40, nodePort: 30100, external: true, endpoints: endpoints(2)}
			env.sync(t, p, w.apply(t, spec))
			env.reachesExactly(t, f, spec)
			for _, n := range []int{3, 5, 1, 3} {
				spec.endpoints = endpoints(n)
				st := w.apply(t, spec)
				if st.Changed == nil {
					t.Fatal("expected an incremental State (Changed set), got a full one")
				}
				env.sync(t, p, st)
				env.flushConntrack(t)
				env.reachesExactly(t, f, spec)
			}
			if err := env.node1.NS.Do(func() error { return p.Cleanup(context.Background()) }); err != nil {
				t.Errorf("cleanup: %v", err)
			}
		})
	}
}

// flushConntrack forgets node1's flows, so that UDP answers show what the
// rules do now, not the flows the previous step left (clearing stale flows
// after an endpoint change is internal/conntrack's job, not this backend's).
func (e *kernelEnv) flushConntrack(t *testing.T) {
	t.Helper()
	err := e.node1.NS.Do(func() error {
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
func (e *kernelEnv) reachesExactly(t *testing.T, f fam, spec svcSpec) {
	t.Helper()
	var want []string
	for _, ep := range spec.endpoints {
		want = append(want, ep.pod)
	}
	slices.Sort(want)
	for i, proto := range []proxy.Protocol{proxy.TCP, proxy.UDP} {
		for _, dst := range []netip.AddrPort{
			netip.AddrPortFrom(f.clusterIP(spec.ip), svcPort),
			netip.AddrPortFrom(f.externalIP(spec.ip), svcPort),
			netip.AddrPortFrom(e.node1.IP(f.v6), uint16(int(spec.nodePort)+i)),
		} {
			if got := servers(askMany(t, e.fromClient(f), proto, dst, 60)); !slices.Equal(got, want) {
				t.Errorf("%d endpoints: %s to %s reached %v, want %v", len(want), proto, dst, got, want)
			}
		}
	}
}
