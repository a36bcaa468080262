package ipvs

import (
	"context"
	"net/netip"
	"testing"

	"github.com/svcproxy/svcproxy/pkg/kipvs"
	"github.com/svcproxy/svcproxy/pkg/pipeline/desired"
	"github.com/svcproxy/svcproxy/pkg/proxy"
)

// The host's other IPVS users in these tests: a keepalived control-plane
// VIP held by this node, and one held by a peer (not local here).
var (
	keepalivedVIP = netip.MustParseAddr("192.0.2.10")
	peerVIP       = netip.MustParseAddr("198.51.100.7")
)

// ownedWorld syncs, over f, a State with every kind of frontend IPVS mode
// makes — cluster, external and LB IPs, TCP, UDP and SCTP node ports on
// both node addresses — and returns their virtual servers.
func ownedWorld(t *testing.T, f *fakes) []kipvs.ServiceKey {
	t.Helper()
	p := newProxier(f, proxy.IPv4, Options{})
	a := svcPort("a", 1, w4.RemotePod(1))
	a.NodePort = 30080
	a.ExternalIPs = []netip.Addr{w4.ExternalIP(1)}
	a.LoadBalancerIPs = []netip.Addr{w4.LoadBalancerIP(1)}
	u := protoPort(proxy.UDP, "u", 2, 30081)
	s := protoPort(proxy.SCTP, "s", 3, 30082)
	mustSync(t, p, baseState(proxy.IPv4, a, u, s))
	ours := []kipvs.ServiceKey{vsKey(w4.ClusterIP(1), 80), vsKey(w4.ExternalIP(1), 80), vsKey(w4.LoadBalancerIP(1), 80)}
	for _, ip := range []netip.Addr{w4.NodeIP, w4.SecondHostIP} {
		ours = append(ours, vsKey(ip, 30080),
			kipvs.ServiceKey{Addr: ip, Protocol: kipvs.UDP, Port: 30081},
			kipvs.ServiceKey{Addr: ip, Protocol: kipvs.SCTP, Port: 30082})
	}
	for _, k := range ours {
		if _, _, ok := f.ipvs.Service(k); !ok {
			t.Fatalf("the sync made no virtual server %s", k)
		}
	}
	return ours
}

// protoPort is port 80 of cluster IP n over proto with a node port.
func protoPort(proto proxy.Protocol, name string, n int, nodePort uint16) *desired.ServicePort {
	sp := svcPort(name, n, w4.RemotePod(n))
	sp.Name.Protocol, sp.Protocol, sp.NodePort = proto, proto, nodePort
	return sp
}

// addForeign programs what keepalived or kube-vip would beside IPVS mode:
// virtual servers on a local VIP, on the node's own address, on a node
// port number with another protocol, on a VIP held by a peer whose port is
// one of our TCP node ports, and on an IPv6 VIP.
func addForeign(t *testing.T, f *fakes) []kipvs.ServiceKey {
	t.Helper()
	if err := f.link.AddAddr("eth0", keepalivedVIP); err != nil {
		t.Fatal(err)
	}
	foreign := []kipvs.ServiceKey{
		vsKey(keepalivedVIP, 6443),
		vsKey(w4.NodeIP, 6443),
		{Addr: w4.NodeIP, Protocol: kipvs.UDP, Port: 30080},
		{Addr: keepalivedVIP, Protocol: kipvs.SCTP, Port: 30082},
		vsKey(peerVIP, 30080),
		vsKey(netip.MustParseAddr("2001:db8::10"), 6443),
	}
	for _, k := range foreign {
		if err := f.ipvs.AddService(kipvs.Service{ServiceKey: k, Scheduler: kipvs.WeightedRoundRobin}); err != nil {
			t.Fatal(err)
		}
	}
	return foreign
}

// TestCleanupLeavesForeignVirtualServers: Cleanup (--cleanup, and the
// start-up cleanup of nftables and iptables modes) deletes the virtual
// servers IPVS mode made and no other: a node's keepalived or kube-vip
// VIPs keep balancing.
func TestCleanupLeavesForeignVirtualServers(t *testing.T) {
	f := newFakes()
	ours := ownedWorld(t, f)
	foreign := addForeign(t, f)
	cleanupFamilies(t, f)
	checkCleaned(t, f, ours, foreign)
}

// cleanupFamilies runs Cleanup as the cleanup of leftovers does: a fresh
// Proxier per family.
func cleanupFamilies(t *testing.T, f *fakes) {
	t.Helper()
	for _, family := range proxy.Families {
		if err := newProxier(f, family, Options{}).Cleanup(context.Background()); err != nil {
			t.Fatalf("Cleanup %s: %v", family, err)
		}
	}
}

// TestCleanupFindsOursWithoutTheLink: a cleanup interrupted after
// kube-ipvs0 went (or an upstream version that removed it first) still
// finds the cluster, external and LB IPs' virtual servers in the ipsets.
func TestCleanupFindsOursWithoutTheLink(t *testing.T) {
	f := newFakes()
	ours := ownedWorld(t, f)
	foreign := addForeign(t, f)
	if err := f.link.DeleteLink(DummyLink); err != nil {
		t.Fatal(err)
	}
	if err := newProxier(f, proxy.IPv4, Options{}).Cleanup(context.Background()); err != nil {
		t.Fatalf("Cleanup: %v", err)
	}
	checkCleaned(t, f, ours, foreign)
}

func checkCleaned(t *testing.T, f *fakes, ours, foreign []kipvs.ServiceKey) {
	t.Helper()
	for _, k := range ours {
		if _, _, ok := f.ipvs.Service(k); ok {
			t.Errorf("IPVS mode's virtual server %s left after Cleanup", k)
		}
	}
	for _, k := range foreign {
		if _, _, ok := f.ipvs.Service(k); !ok {
			t.Errorf("Cleanup deleted %s, which IPVS mode never made", k)
		}
	}
}
