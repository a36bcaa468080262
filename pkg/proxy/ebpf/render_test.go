package ebpf

import (
	"net/netip"
	"testing"

	"github.com/svcproxy/svcproxy/pkg/proxy"
	"github.com/svcproxy/svcproxy/pkg/proxy/desired"
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
	if internal.Count != 2 || internal.Affinity != 30 || internal.Flags != 0 {
		t.Errorf("cluster IP record %+v, want 2 endpoints, affinity 30 s", internal)
	}
	external := c.Services[frontendKey(extIP, 80, 6)]
	if external.ID == internal.ID || external.Count != 2 {
		t.Errorf("external IP record %+v: want the external group (2 endpoints), not the internal one %d", external, internal.ID)
	}
	for _, k := range []svcKey{frontendKey(lbIP, 80, 6), frontendKey(node, 30080, 6)} {
		if got, ok := c.Services[k]; !ok || got != external {
			t.Errorf("%s: record %+v (present %v), want the external IP's %+v", k, got, ok, external)
		}
	}
	if len(c.Services) != 4 || len(c.Backends) != 4 {
		t.Errorf("%d frontends and %d slots, want 4 and 4 (2 groups of 2)", len(c.Services), len(c.Backends))
	}
	for slot, want := range []netip.AddrPort{netip.AddrPortFrom(pod, 8080), netip.AddrPortFrom(pod, 8081)} {
		if got := c.Backends[beKey{ID: internal.ID, Slot: uint32(slot)}].AddrPort(); got != want {
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

	if got := c.Services[frontendKey(extIP, 53, 17)]; got.Count != 1 || got.Flags != 0 {
		t.Errorf("eTP Local external IP from a pod: %+v, want the cluster group of 1", got)
	}
	if got := c.Services[frontendKey(vip4, 443, 6)]; got.Count != 0 || got.Flags != 0 {
		t.Errorf("cluster IP without endpoints: %+v, want count 0 and reject", got)
	}
	if _, ok := c.Services[frontendKey(lbIP, 443, 6)]; ok {
		t.Error("an LB IP with source ranges was rendered")
	}

	local.Routes = &desired.Routes{}
	local.Routes[desired.ExternalPath][desired.FromPod] = desired.Route{Set: desired.SetExternal}
	if got := Render(st).Services[frontendKey(extIP, 53, 17)]; got.Count != 0 || got.Flags != flagDrop {
		t.Errorf("external IP routed to an empty Local set: %+v, want count 0 and drop", got)
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
