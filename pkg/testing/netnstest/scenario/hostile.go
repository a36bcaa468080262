package scenario

import (
	"net/netip"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"

	"github.com/svcproxy/svcproxy/pkg/proxy"
	"github.com/svcproxy/svcproxy/pkg/testing/netnstest"
)

// HostileServices are Services any tenant allowed to create Services can
// write, each of which once stopped a backend from programming every
// Service on the node: the kernel, nft or iptables-restore
// refused the whole sync. Their slots (30–39) are outside Services'.
// HostileCases checks that they, and everything else, work as intended.
func (e *Env) HostileServices() []Spec {
	allowed := func(v6 bool) string {
		if v6 {
			return netip.PrefixFrom(e.Allowed[1], 128).String()
		}
		return netip.PrefixFrom(e.Allowed[0], 32).String()
	}
	one := []EPSpec{{Pod: "pod-a"}}
	return []Spec{
		// Nested and duplicate ranges: an interval set refuses overlapping
		// elements ("File exists"); the same addresses in sloppy and mapped
		// spellings too.
		{Name: "nested-ranges", Slot: 30, LB: true, Endpoints: one, Ranges: func(e *Env) []string {
			return []string{allowed(false), " " + allowed(false) + " ", "::ffff:" + e.Allowed[0].String() + "/128",
				sloppy(e.Allowed[0]) + "/32", "203.0.113.0/24", "203.0.113.128/25",
				allowed(true), "2001:db8::/32", "2001:db8:1::/48"}
		}},
		// A range holding the node and the LB IP: the LB IP, added as an
		// allowed source for node-originated traffic, overlapped it.
		{Name: "node-in-range", Slot: 31, LB: true, Endpoints: one, Ranges: func(e *Env) []string {
			return []string{"198.18.0.0/16", "fd00:18::/32"}
		}},
		// Nothing parses: the firewall must deny (it used to vanish).
		{Name: "fail-closed", Slot: 32, LB: true, Endpoints: one, Ranges: func(*Env) []string {
			return []string{"garbage", "10.0.0.0/33", "fd00::/129"}
		}},
		// A /0 range means no firewall (and used to overlap every other range).
		{Name: "zero-range", Slot: 33, LB: true, Endpoints: one, Ranges: func(e *Env) []string {
			return []string{allowed(false), "0.0.0.0/0", allowed(true), "::/0"}
		}},
		// Leading zeros and mapped forms of a real external IP are that IP.
		{Name: "sloppy-external", Slot: 34, Endpoints: one, Tweak: func(svc *v1.Service) {
			svc.Spec.ExternalIPs = []string{sloppy(Families[0].ExternalIP(34)),
				"::ffff:" + Families[0].ExternalIP(34).String(), Families[1].ExternalIP(34).String()}
		}},
		// Zones reached nft and iptables-restore text verbatim (a newline in
		// one became a line of its own). Refused; the rest of the Service works.
		{Name: "zoned", Slot: 35, Endpoints: []EPSpec{{Pod: "pod-a"}, {Pod: "pod-b"}}, Tweak: func(svc *v1.Service) {
			svc.Spec.ExternalIPs = []string{"fd00:18:100::23%lo", "198.18.100.35%x\nflush ruleset", "fd00:18:100::23%lo\n"}
			svc.Status.LoadBalancer.Ingress = []v1.LoadBalancerIngress{{IP: "198.18.200.35%1"}, {IP: "fd00:18:200::23%eth0"}}
		}, TweakSlice: func(f Fam, sl *discoveryv1.EndpointSlice) {
			zoned := "fe80::1%eth0"
			if !f.V6 {
				zoned = "10.0.0.1%eth0"
			}
			sl.Endpoints[1].Addresses = []string{zoned} // pod-b's endpoint is refused
		}},
		// An external IP equal to another Service's cluster IP and port
		// (hairpin's, slot 19): the cluster IP wins, on every node alike.
		{Name: "a-thief", Slot: 36, Endpoints: []EPSpec{{Pod: "pod-b"}}, Tweak: func(svc *v1.Service) {
			svc.Spec.ExternalIPs = []string{Families[0].ClusterIP(19).String(), Families[1].ClusterIP(19).String()}
		}},
		// External IPs equal to node1's own addresses, on ports the node
		// serves itself: another Service's node port (ranges', 30020) and
		// the kubelet's. Refused: the node keeps its own traffic.
		{Name: "node-port-squatter", Slot: 37, Endpoints: []EPSpec{{Pod: "pod-b"}}, Tweak: e.onNodeAddress(30020)},
		{Name: "kubelet-squatter", Slot: 38, Endpoints: []EPSpec{{Pod: "pod-b"}}, Tweak: e.onNodeAddress(KubeletPort)},
		// Endpoint addresses that can be nobody's endpoint, beside pod-a's:
		// refused at parsing (nftables and iptables DNATed to them, the
		// IPVS kernel refuses a multicast real server).
		{Name: "unusable-endpoints", Slot: 39, Endpoints: one, TweakSlice: func(f Fam, sl *discoveryv1.EndpointSlice) {
			addrs := []string{"127.0.0.1", "224.0.0.5", "239.1.2.3", "255.255.255.255", "169.254.1.1", "0.0.0.0"}
			if f.V6 {
				addrs = []string{"::1", "ff02::1", "ff0e::1", "fe80::1", "::"}
			}
			for _, a := range addrs {
				ep := *sl.Endpoints[0].DeepCopy()
				ep.Addresses = []string{a}
				sl.Endpoints = append(sl.Endpoints, ep)
			}
		}},
	}
}

// KubeletPort is the port a node serves itself (as the kubelet does) in
// HostileCases.
const KubeletPort = 10250

// onNodeAddress makes a Service's external IPs node1's addresses and its
// ports first, first+1, … (one per protocol).
func (e *Env) onNodeAddress(first int32) func(*v1.Service) {
	return func(svc *v1.Service) {
		svc.Spec.ExternalIPs = []string{e.Node1.IPv4.String(), e.Node1.IPv6.String()}
		for i := range svc.Spec.Ports {
			svc.Spec.Ports[i].Port = first + int32(i)
		}
	}
}

// sloppy writes a with leading zeros ("198.018.000.005").
func sloppy(a netip.Addr) string {
	parts := strings.Split(a.String(), ".")
	for i, p := range parts {
		parts[i] = "0" + p
	}
	return strings.Join(parts, ".")
}

// HostileCases checks HostileServices in family f on a node whose backend
// programmed them with Services (the ordinary checks still pass, too).
func (e *Env) HostileCases(t *testing.T, f Fam) {
	t.Run("NestedRanges", func(t *testing.T) { e.firewall(t, f, 30, true, false) })
	t.Run("NodeInRange", func(t *testing.T) { e.firewall(t, f, 31, true, true) })
	t.Run("FailClosed", func(t *testing.T) { e.firewall(t, f, 32, false, false) })
	t.Run("ZeroRange", func(t *testing.T) { e.firewall(t, f, 33, true, true) })
	t.Run("SloppyExternalIP", func(t *testing.T) {
		for _, c := range e.clients(f) {
			if _, err := c.Ask(proxy.TCP, netip.AddrPortFrom(f.ExternalIP(34), SvcPort)); err != nil {
				t.Errorf("external IP written with leading zeros / mapped, from %s: %v", c.NS.Role, err)
			}
		}
	})
	t.Run("ClusterIPNotStolen", func(t *testing.T) {
		seen := AskMany(t, e.FromPod("pod-c"), proxy.TCP, netip.AddrPortFrom(f.ClusterIP(19), SvcPort), 12)
		if got := Servers(seen); len(got) != 1 || got[0] != "pod-a" {
			t.Errorf("cluster IP of hairpin reached %v, want only its own pod-a (a-thief's externalIP claims it; its name sorts first)", got)
		}
	})
	t.Run("NodePortNotTakenByExternalIP", func(t *testing.T) { e.nodePortNotTaken(t, f) })
	t.Run("NodeServiceNotTakenByExternalIP", func(t *testing.T) { e.nodeServiceNotTaken(t, f) })
	t.Run("UnusableEndpoints", func(t *testing.T) {
		seen := AskMany(t, e.FromPod("pod-c"), proxy.TCP, netip.AddrPortFrom(f.ClusterIP(39), SvcPort), 12)
		if got := Servers(seen); len(got) != 1 || got[0] != "pod-a" {
			t.Errorf("cluster IP of unusable-endpoints reached %v, want only pod-a (the other endpoint addresses refused)", got)
		}
	})
	t.Run("Zoned", func(t *testing.T) {
		seen := AskMany(t, e.FromPod("pod-c"), proxy.TCP, netip.AddrPortFrom(f.ClusterIP(35), SvcPort), 12)
		if got := Servers(seen); len(got) != 1 || got[0] != "pod-a" {
			t.Errorf("cluster IP of the zoned Service reached %v, want only pod-a (pod-b's zoned address refused)", got)
		}
	})
}

// nodePortNotTaken: node1's address on ranges' node ports still reaches
// ranges' endpoint (pod-a), not node-port-squatter's (pod-b).
func (e *Env) nodePortNotTaken(t *testing.T, f Fam) {
	for _, c := range e.clients(f) {
		for i, proto := range []proxy.Protocol{proxy.TCP, proxy.UDP} {
			dst := netip.AddrPortFrom(e.Node1.IP(f.V6), uint16(30020+i))
			if got := Servers(AskMany(t, c, proto, dst, 6)); len(got) != 1 || got[0] != "pod-a" {
				t.Errorf("%s from %s to node port %s reached %v, want only pod-a (an external IP on the node's address claims it)",
					proto, c.NS.Role, dst, got)
			}
		}
	}
}

// nodeServiceNotTaken: a pod connecting to node1's address on the port the
// node serves itself reaches the node, not kubelet-squatter's pod-b.
func (e *Env) nodeServiceNotTaken(t *testing.T, f Fam) {
	srv, err := e.Node1.NS.Serve("node1-kubelet", proxy.TCP, KubeletPort)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = srv.Close() }()
	dst := netip.AddrPortFrom(e.Node1.IP(f.V6), KubeletPort)
	if got := Servers(AskMany(t, e.FromPod("pod-c"), proxy.TCP, dst, 6)); len(got) != 1 || got[0] != "node1-kubelet" {
		t.Errorf("pod to %s reached %v, want only the node's own server (an external IP on the node's address claims it)", dst, got)
	}
}

// firewall checks the LB IP of slot from the allowed and the denied client.
func (e *Env) firewall(t *testing.T, f Fam, slot int, allowed, denied bool) {
	lb := netip.AddrPortFrom(f.LBIP(slot), SvcPort)
	for _, c := range []struct {
		name string
		src  netip.Addr
		want bool
	}{{"allowed client", f.Pick(e.Allowed), allowed}, {"denied client", f.Pick(e.Denied), denied}} {
		client := netnstest.Client{NS: e.Client, Source: c.src, Timeout: DropTimeout}
		_, err := client.Ask(proxy.TCP, lb)
		switch {
		case c.want && err != nil:
			t.Errorf("%s to LB IP %s: %v, want answered", c.name, lb, err)
		case !c.want && netnstest.OutcomeOf(err) != netnstest.Timeout:
			t.Errorf("%s to LB IP %s: %v (%s), want dropped", c.name, lb, err, netnstest.OutcomeOf(err))
		}
	}
}
