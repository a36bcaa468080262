package dataplane

import (
	"net/netip"
	"regexp"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	F "github.com/svcproxy/svcproxy/test/e2e/framework"
)

// familyIPs returns the Service's ClusterIPs, IPv4 first, and fails unless
// it holds exactly the families want lists, in that order.
func familyIPs(t *testing.T, svc *corev1.Service, want ...corev1.IPFamily) []string {
	t.Helper()
	if !slices.Equal(svc.Spec.IPFamilies, want) || len(svc.Spec.ClusterIPs) != len(want) {
		t.Fatalf("Service %s: ipFamilies %v, clusterIPs %v; want one ClusterIP per family of %v",
			svc.Name, svc.Spec.IPFamilies, svc.Spec.ClusterIPs, want)
	}
	for i, s := range svc.Spec.ClusterIPs {
		ip, err := netip.ParseAddr(s)
		if err != nil || ip.Is4() != (want[i] == corev1.IPv4Protocol) {
			t.Fatalf("Service %s: ClusterIP %q is not %s", svc.Name, s, want[i])
		}
	}
	return svc.Spec.ClusterIPs
}

// testSingleStackDefault: in the dual-stack cluster a Service without
// ipFamilyPolicy stays single-stack IPv4, so every other scenario's
// Services are what they were in an IPv4-only cluster.
func testSingleStackDefault(t *testing.T, c *F.Cluster) {
	svc := c.CreateService(F.NewService("v4default", corev1.ServiceTypeClusterIP))
	defer c.DeleteService("v4default")
	familyIPs(t, svc, corev1.IPv4Protocol)
	if p := svc.Spec.IPFamilyPolicy; p == nil || *p != corev1.IPFamilyPolicySingleStack {
		t.Fatalf("Service v4default: ipFamilyPolicy %v, want SingleStack", p)
	}
}

// testDualStack: a RequireDualStack NodePort Service with one slice per
// family. Pods reach both ClusterIPs and are balanced over both endpoints
// (on two nodes) in each family; the outside client reaches the NodePort on
// the nodes' IPv6 addresses, masqueraded as for IPv4 (with the tc
// programs, through them, the entry node's own pod seeing the client); scaling the IPv6 slice to zero makes only the
// IPv6 frontends REJECT.
// dualStackNodePort creates a RequireDualStack NodePort Service served by
// eps in both families and returns it with its IPv4 and IPv6 cluster IPs.
func dualStackNodePort(t *testing.T, c *F.Cluster, name string, eps ...F.EP) (svc *corev1.Service, v4, v6 string) {
	t.Helper()
	svc = F.NewService(name, corev1.ServiceTypeNodePort)
	policy := corev1.IPFamilyPolicyRequireDualStack
	svc.Spec.IPFamilyPolicy = &policy
	svc.Spec.IPFamilies = []corev1.IPFamily{corev1.IPv4Protocol, corev1.IPv6Protocol}
	svc = c.CreateService(svc)
	ips := familyIPs(t, svc, corev1.IPv4Protocol, corev1.IPv6Protocol)
	c.SetEndpoints(svc, eps...)
	c.SetEndpoints6(svc, eps...)
	return svc, ips[0], ips[1]
}

func testDualStack(t *testing.T, c *F.Cluster) {
	testSingleStackDefault(t, c)
	n1, n2 := c.Nodes[0], c.Nodes[1]
	a, b := c.AddPod(n1, "dsa"), c.AddPod(n2, "dsb")
	svc, v4, v6 := dualStackNodePort(t, c, "dual", F.EP{Pod: a}, F.EP{Pod: b})

	both := F.AllOf("dsa", "dsb")
	for _, ip := range []string{v4, v6} {
		for _, tg := range frontends(svc, ip, false) {
			c.Expect("cli1", tg, converge, both)
		}
	}
	// From a pod: no masquerade, the pod's own IPv6 address.
	tcp, np := port(svc, corev1.ProtocolTCP)
	c.Expect("cli2", F.TCP(v6, tcp), converge, sourceIs(both, n2.PodNet6+"100"))
	for _, n := range c.Nodes {
		for _, tg := range frontends(svc, n.IP6, true) {
			c.Expect("ext", tg, converge, both)
		}
	}
	// eTP=Cluster from outside: masqueraded to an IPv6 address of the
	// node it entered, as in IPv4; with the tc programs, only toward the
	// other node's pod: the node's own pod sees the client, as in IPv4
	// (docs/design/0009-ebpf-without-nftables.md).
	masq := sourceIs(both, n1.IP6, n1.PodNet6+"1")
	if c.TCServes(n1) {
		masq = sourcePerPod(both, map[string]string{"dsa": F.ExtIP6, "dsb": n1.IP6})
	}
	c.Expect("ext", F.TCP(n1.IP6, np), converge, masq)
	// With the tc programs on node 1's interface, they translated it: their
	// IPv6 conntrack table holds the flows to the node port.
	if c.TCAttached(n1, "eth0") {
		dst := netip.AddrPortFrom(netip.MustParseAddr(n1.IP6), uint16(np))
		if flows, err := c.TCFlowsTo(n1, dst); err != nil || flows == 0 {
			t.Errorf("%s: %d flows to %v in the tc programs' IPv6 table (%v), want those of the requests above", n1.Name, flows, dst, err)
		} else {
			t.Logf("%s: %d flows to %v in the tc programs' IPv6 table", n1.Name, flows, dst)
		}
	}

	c.SetEndpoints6(svc)
	for _, tg := range frontends(svc, v6, false) {
		expectRefused6(t, c, "cli1", tg)
	}
	for _, tg := range frontends(svc, n2.IP6, true) {
		expectRefused6(t, c, "ext", tg)
	}
	// The IPv4 family is untouched by the IPv6 slice's change.
	for _, tg := range frontends(svc, v4, false) {
		c.Expect("cli1", tg, converge, both)
	}
	for _, tg := range frontends(svc, n2.IP, true) {
		c.Expect("ext", tg, converge, both)
	}
	// With the tc programs a node has no IPv6 rules: the socket hooks and
	// the programs' maps hold the Service.
	for _, n := range c.Nodes {
		waitRules6(t, c, n, v6, !c.TCServes(n))
	}
	c.DeleteService("dual")
	for _, n := range c.Nodes {
		waitRules6(t, c, n, v6, false)
	}
}

// expectRefused6 expects an IPv6 frontend to REJECT. Requests get 2.5 s,
// not 1 s: the REJECT's ICMPv6 error for a client's first SYN comes back
// (veth to veth, in one softirq) while connect() still holds the socket,
// and the kernel keeps it only as a soft error (TcpExtLockDroppedIcmps);
// the error for the SYN retransmitted after the 1 s initial RTO ends the
// connect refused. Measured here; IPv4 clients get refused at once.
func expectRefused6(t *testing.T, c *F.Cluster, from string, tg F.Target) {
	t.Helper()
	if err := c.EventuallyWithin(from, tg, 5, 2500*time.Millisecond, converge, F.Refused()); err != nil {
		t.Fatal(err)
	}
}

// waitRules6 waits until the IPv6 address ip is (present) or is not in
// node n's IPv6 rules: the nftables ruleset (both families) or
// ip6tables-save, which Cluster.Ruleset (iptables-save) does not cover.
func waitRules6(t *testing.T, c *F.Cluster, n *F.Node, ip string, present bool) {
	t.Helper()
	dump := []string{"nft", "list", "ruleset"}
	if c.Opts.Mode == "iptables" {
		dump = []string{"ip6tables-save"}
	}
	// Hex digits and colons continue an IPv6 address.
	re := regexp.MustCompile(`(^|[^0-9a-fA-F:])` + regexp.QuoteMeta(ip) + `([^0-9a-fA-F:]|$)`)
	deadline := time.Now().Add(converge)
	for {
		rules, err := c.Exec(n, dump[0], dump[1:]...)
		if err != nil {
			t.Fatal(err)
		}
		if re.MatchString(rules) == present {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %s in the IPv6 rules = %t after %v, want %t", n.Name, ip, !present, converge, present)
		}
		time.Sleep(200 * time.Millisecond)
	}
}
