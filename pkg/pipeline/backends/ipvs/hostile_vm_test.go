//go:build ipvsvm

package ipvs_test

import (
	"net/netip"
	"slices"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"

	"github.com/svcproxy/svcproxy/pkg/pipeline/backends/ipvs"
	"github.com/svcproxy/svcproxy/pkg/pipeline/model"
	"github.com/svcproxy/svcproxy/pkg/proxy"
	"github.com/svcproxy/svcproxy/pkg/testing/netnstest/scenario"
	"github.com/svcproxy/svcproxy/pkg/testing/proxytest"
)

// TestVMHostile programs Services a tenant may write among
// ordinary ones: nested, duplicate and leading-zero source ranges that
// include the LB IP itself (ipset refuses an entry added twice), IPv4-mapped
// and zoned external IPs. The sync must succeed and each Service must do
// what upstream does with the same fields.
func TestVMHostile(t *testing.T) {
	e := newVMEnv(t)
	for _, f := range scenario.Families {
		t.Run(string(f.Family), func(t *testing.T) {
			w := &world{e: e, f: f, tracker: model.NewTracker(f.Family)}
			p, _ := e.newProxier(t, f, ipvs.Options{})
			e.sync(t, p, w.apply(append(vmServices(), e.hostileServices()...)...))
			t.Run("ordinary", func(t *testing.T) { e.balances(t, f, f.ClusterIP(10)) })
			t.Run("NestedRangesAllowClient", func(t *testing.T) { e.balances(t, f, f.LBIP(30)) })
			t.Run("NestedRangesDropOthers", func(t *testing.T) { e.refused(t, f, f.LBIP(31)) })
			t.Run("MappedExternalIP", func(t *testing.T) { e.balances(t, f, f.ExternalIP(32)) })
			t.Run("ZonedExternalIPIgnored", func(t *testing.T) { e.balances(t, f, f.ClusterIP(33)) })
			t.Run("Cleanup", func(t *testing.T) { e.cleanup(t, f, p) })
		})
	}
}

// TestVMNodeAddressesAndUnusableEndpoints: with every Node's addresses
// known (--watch-node-addresses), an external IP equal to node2's is not
// bound on node1's kube-ipvs0, where it made node1 answer for node2 (node2
// cut off from node1). The same Service's endpoints include multicast,
// loopback, broadcast and link-local addresses beside the pods: the kernel
// refuses a multicast real server, which failed the sync; they are refused
// at parsing, the sync succeeds and the pods serve.
func TestVMNodeAddressesAndUnusableEndpoints(t *testing.T) {
	e := newVMEnv(t)
	for _, f := range scenario.Families {
		t.Run(string(f.Family), func(t *testing.T) {
			w := &world{e: e, f: f, tracker: model.NewTracker(f.Family)}
			w.clusterNodeIPs = []netip.Addr{e.node1.IPv4, e.node2.IPv4, e.node1.IPv6, e.node2.IPv6}
			slices.SortFunc(w.clusterNodeIPs, netip.Addr.Compare)
			p, _ := e.newProxier(t, f, ipvs.Options{})
			other := e.node2.IP(f.V6)
			squatter := svcSpec{name: "squatter", ip: 35, endpoints: allPods, edit: func(svc *v1.Service) {
				svc.Spec.ExternalIPs = []string{e.node2.IPv4.String(), e.node2.IPv6.String()}
			}}
			unusable := []string{"224.0.0.5", "239.1.2.3", "127.0.0.1", "255.255.255.255", "169.254.1.1"}
			if f.V6 {
				unusable = []string{"ff02::1", "ff0e::1", "::1", "fe80::1"}
			}
			var eps []proxytest.EP
			for _, a := range unusable {
				eps = append(eps, proxytest.EP{IP: netip.MustParseAddr(a), Node: "node1"})
			}
			var ports []proxytest.SlicePort
			for _, proto := range protocols {
				ports = append(ports, proxytest.SlicePort{Name: portName(proto), Port: podPort, Protocol: v1.Protocol(proto)})
			}
			bad := proxytest.Slice(testNS, squatter.name, ports, eps...)
			bad.Name = "squatter-unusable-" + strings.ToLower(string(f.Family))
			w.tracker.OnEndpointSliceUpdate(nil, bad)
			e.sync(t, p, w.apply(append(vmServices(), squatter)...))

			if out := run(t, e.node1.NS, "ip", "-br", "addr", "show", ipvs.DummyLink); strings.Contains(out, " "+other.String()+"/") {
				t.Errorf("node2's address %s is bound on node1's %s: %s", other, ipvs.DummyLink, out)
			}
			t.Run("EndpointsArePods", func(t *testing.T) { e.balances(t, f, f.ClusterIP(35)) })
			t.Run("Cleanup", func(t *testing.T) { e.cleanup(t, f, p) })
		})
	}
}

func (e *vmEnv) hostileServices() []svcSpec {
	v4, v6 := e.clientIPs[0], e.clientIPs[1]
	lb4, lb6 := scenario.Families[0].LBIP(30), scenario.Families[1].LBIP(30)
	allow := []string{
		sloppyPrefix(netip.PrefixFrom(v4, 8)), netip.PrefixFrom(v4, 16).Masked().String(),
		netip.PrefixFrom(v4, 16).Masked().String(), v4.String() + "/32", lb4.String() + "/32",
		"::ffff:" + v4.String() + "/128",
		netip.PrefixFrom(v6, 48).Masked().String(), netip.PrefixFrom(v6, 64).Masked().String(), lb6.String() + "/128",
	}
	deny := []string{"203.0.113.0/24", "203.0.113.128/25", "203.0.113.128/25", "2001:db8::/32", "2001:db8:1::/48"}
	ranges := func(r []string) func(*v1.Service) {
		return func(svc *v1.Service) { svc.Spec.LoadBalancerSourceRanges = r }
	}
	ext4, ext6 := scenario.Families[0].ExternalIP(32), scenario.Families[1].ExternalIP(32)
	return []svcSpec{
		{name: "fw-allow", ip: 30, lb: true, endpoints: allPods, edit: ranges(allow)},
		{name: "fw-deny", ip: 31, lb: true, endpoints: allPods, edit: ranges(deny)},
		{name: "mapped", ip: 32, endpoints: allPods, edit: func(svc *v1.Service) {
			svc.Spec.ExternalIPs = []string{"::ffff:" + ext4.String(), ext6.String()}
		}},
		{name: "zoned", ip: 33, endpoints: allPods, edit: func(svc *v1.Service) {
			svc.Spec.ExternalIPs = []string{"fe80::1%eth0", "10.0.0.1%eth0\nflush ruleset"}
		}},
	}
}

// sloppyPrefix writes p's masked address with leading zeros ("010.000.000.000/8").
func sloppyPrefix(p netip.Prefix) string {
	parts := strings.Split(p.Masked().Addr().String(), ".")
	for i, s := range parts {
		parts[i] = "0" + s
	}
	return strings.Join(parts, ".") + "/" + p.String()[strings.IndexByte(p.String(), '/')+1:]
}

// refused: every protocol to vip from the client gets no answer.
func (e *vmEnv) refused(t *testing.T, f scenario.Fam, vip netip.Addr) {
	for _, proto := range []proxy.Protocol{proxy.TCP, proxy.UDP} {
		if ans, err := e.fromClient(f).Ask(proto, netip.AddrPortFrom(vip, svcPort)); err == nil {
			t.Errorf("%s to %s from a source outside its ranges reached %s", proto, vip, ans.Server)
		}
	}
}
