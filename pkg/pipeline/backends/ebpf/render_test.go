package ebpf

import (
	"net/netip"
	"testing"

	"github.com/svcproxy/svcproxy/pkg/pipeline/desired"
	"github.com/svcproxy/svcproxy/pkg/proxy"
)

var (
	node  = netip.MustParseAddr("198.18.1.1")
	extIP = netip.MustParseAddr("198.18.2.1")
	lbIP  = netip.MustParseAddr("198.18.3.1")
	pod   = netip.MustParseAddr("198.18.4.1")
)

func TestRenderFrontends(t *testing.T) {
	sp := svc("web", proxy.TCP, vip4, 80, eps(pod, 8080, 8081)...)
	sp.ExternalIPs = []netip.Addr{extIP}
	sp.LoadBalancerIPs = []netip.Addr{lbIP}
	sp.NodePort = 30080
	sp.AffinitySeconds = 30
	st := stateOf(proxy.IPv4, sp)
	st.NodeIPs = []netip.Addr{node}
	st.NodePorts = desired.NodePortAddrs{All: true}
	c := Render(st)

	internal := c.Services[frontendKey(vip4, 80, 6)]
	if internal.Pod.Count != 2 || internal.Affinity != 30 || internal.Pod.Flags != 0 || internal.Node != internal.Pod {
		t.Errorf("cluster IP record %+v, want 2 endpoints for pods and the node alike, affinity 30 s", internal)
	}
	external := c.Services[frontendKey(extIP, 80, 6)]
	if external.Pod.ID == internal.Pod.ID || external.Pod.Count != 2 {
		t.Errorf("external IP record %+v: want the external group (2 endpoints), not the internal one %d", external, internal.Pod.ID)
	}
	for _, k := range []svcKey{frontendKey(lbIP, 80, 6), frontendKey(node, 30080, 6)} {
		if got, ok := c.Services[k]; !ok || got != external {
			t.Errorf("%s: record %+v (present %v), want the external IP's %+v", k, got, ok, external)
		}
	}
	if got, ok := c.Services[anyPort(vip4)]; !ok || got.Pod.Count != 0 || got.Pod.Flags != 0 {
		t.Errorf("the cluster IP's other ports: %+v (present %v), want a reject", got, ok)
	}
	if len(c.Services) != 5 || len(c.Backends) != 4 {
		t.Errorf("%d frontends and %d slots, want 5 and 4 (2 groups of 2)", len(c.Services), len(c.Backends))
	}
	for slot, want := range []netip.AddrPort{netip.AddrPortFrom(pod, 8080), netip.AddrPortFrom(pod, 8081)} {
		if got := c.Backends[beKey{ID: internal.Pod.ID, Slot: uint32(slot)}].AddrPort(); got != want {
			t.Errorf("internal slot %d holds %s, want %s", slot, got, want)
		}
	}
}

func TestRenderPolicy(t *testing.T) {
	// externalTrafficPolicy Local with a detector: a pod's traffic to an
	// external frontend goes to the cluster-wide endpoints.
	local := svc("local", proxy.UDP, vip4, 53, eps(pod, 53)...)
	local.ExternalIPs = []netip.Addr{extIP}
	local.ExternalLocal = true
	local.External = desired.Dispatch{Empty: desired.Drop}
	// Source ranges need the client address: the LB IP is not rendered.
	ranged := svc("ranged", proxy.TCP, vip4, 443)
	ranged.LoadBalancerIPs = []netip.Addr{lbIP}
	ranged.AllowedSources = []netip.Prefix{netip.MustParsePrefix("198.18.0.0/16")}
	st := stateOf(proxy.IPv4, local, ranged)
	st.Masquerade.Local = desired.LocalDetector{Mode: desired.LocalCIDR, CIDRs: []netip.Prefix{netip.MustParsePrefix("198.18.4.0/24")}}
	c := Render(st)

	if got := c.Services[frontendKey(extIP, 53, 17)]; got.Pod.Count != 1 || got.Pod.Flags != 0 || got.Node != got.Pod {
		t.Errorf("eTP Local external IP from a pod or the node: %+v, want the cluster group of 1", got)
	}
	if got := c.Services[frontendKey(vip4, 443, 6)]; got.Pod.Count != 0 || got.Pod.Flags != 0 {
		t.Errorf("cluster IP without endpoints: %+v, want count 0 and reject", got)
	}
	if _, ok := c.Services[frontendKey(lbIP, 443, 6)]; ok {
		t.Error("an LB IP with source ranges was rendered")
	}

	// Without a detector, a pod's traffic is external's (the local
	// endpoints, here none), the node's still the cluster's.
	st.Masquerade.Local = desired.LocalDetector{}
	got := Render(st).Services[frontendKey(extIP, 53, 17)]
	if got.Pod.Count != 0 || got.Pod.Flags != flagDrop || got.Node.Count != 1 {
		t.Errorf("eTP Local external IP without a detector: %+v, want a drop for pods and the cluster group for the node", got)
	}
}

func TestRenderIDsStable(t *testing.T) {
	a := svc("a", proxy.TCP, vip4, 80, eps(pod, 80)...)
	b := svc("b", proxy.TCP, netip.MustParseAddr("172.30.0.11"), 80, eps(pod, 81)...)
	before := Render(stateOf(proxy.IPv4, a))
	after := Render(stateOf(proxy.IPv4, a, b))
	k := frontendKey(vip4, 80, 6)
	if before.Services[k] != after.Services[k] {
		t.Errorf("adding a service changed another's record: %+v, then %+v", before.Services[k], after.Services[k])
	}
}
