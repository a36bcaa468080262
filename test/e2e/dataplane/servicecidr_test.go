package dataplane

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	F "github.com/svcproxy/svcproxy/test/e2e/framework"
)

// testServiceCIDRs: in nftables mode svcproxy follows the
// ServiceCIDR objects through the API — the API server's default one
// (from --service-cluster-ip-range) and one created here — and drops new
// connections to their addresses that no Service holds, as upstream does;
// Services in the new range still answer. iptables mode, like upstream's,
// has no such rule. (The kernel test TestKernelServiceCIDRs shows the
// packet never leaves the node.)
func testServiceCIDRs(t *testing.T, c *F.Cluster) {
	ctx, cancel := c.Ctx(time.Minute)
	defer cancel()
	extra := &networkingv1.ServiceCIDR{ObjectMeta: metav1.ObjectMeta{Name: "e2e-extra"},
		Spec: networkingv1.ServiceCIDRSpec{CIDRs: []string{"10.100.0.0/24"}}} // not adjacent to 10.96.0.0/16: nft would list the two as one range
	if _, err := c.Admin.NetworkingV1().ServiceCIDRs().Create(ctx, extra, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating ServiceCIDR: %v", err)
	}
	want := []string{"ip daddr { 10.96.0.0/16, 10.100.0.0/24 } drop", "ip6 daddr fd00:10:96::/108 drop"} // nft lists a one-element set as a plain match
	for _, n := range c.Nodes {
		var rules string
		deadline := time.Now().Add(converge)
		for {
			var err error
			if rules, err = c.Ruleset(n); err != nil {
				t.Fatalf("%s: ruleset: %v", n.Name, err)
			}
			if !F.UsesNFTables(c.Opts.Mode) || containsAll(rules, want) || time.Now().After(deadline) {
				break
			}
			time.Sleep(200 * time.Millisecond)
		}
		switch {
		case F.UsesNFTables(c.Opts.Mode) && !containsAll(rules, want):
			t.Errorf("%s: no drop for the ServiceCIDRs' unallocated addresses (want %q):\n%s", n.Name, want, rules)
		case !F.UsesNFTables(c.Opts.Mode) && strings.Contains(rules, "10.100.0.0/24"):
			t.Errorf("%s: %s mode renders the ServiceCIDRs (upstream does not):\n%s", n.Name, c.Opts.Mode, rules)
		}
	}
	a := c.AddPod(c.Nodes[0], "ca")
	svc := F.NewService("in-extra", corev1.ServiceTypeClusterIP)
	svc.Spec.ClusterIP, svc.Spec.ClusterIPs = "10.100.0.10", []string{"10.100.0.10"}
	svc = c.CreateService(svc)
	c.SetEndpoints(svc, F.EP{Pod: a})
	c.Expect("cli1", F.TCP(svc.Spec.ClusterIP, 80), converge, F.AllOf("ca"))
	if rs := c.Ask("cli1", F.TCP("10.100.0.11", 80), 1, time.Second); F.Failing("")(rs) != nil {
		t.Errorf("an unallocated address of the new range answered: %v", rs)
	}
}

func containsAll(s string, subs []string) bool {
	for _, sub := range subs {
		if !strings.Contains(s, sub) {
			return false
		}
	}
	return true
}
