package dataplane

import (
	"fmt"
	"regexp"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	F "github.com/svcproxy/svcproxy/test/e2e/framework"
)

// port returns the Service port (and node port) of protocol proto.
func port(svc *corev1.Service, proto corev1.Protocol) (int32, int32) {
	for _, p := range svc.Spec.Ports {
		if p.Protocol == proto {
			return p.Port, p.NodePort
		}
	}
	panic("no " + string(proto) + " port")
}

// frontends returns TCP and UDP targets for ip at the Service port (or the
// node port when nodePort is set).
func frontends(svc *corev1.Service, ip string, nodePort bool) []F.Target {
	tp, tnp := port(svc, corev1.ProtocolTCP)
	up, unp := port(svc, corev1.ProtocolUDP)
	if nodePort {
		tp, up = tnp, unp
	}
	return []F.Target{F.TCP(ip, tp), F.UDP(ip, up)}
}

// sourceIs additionally checks the client address the pods saw: one of srcs.
func sourceIs(inner F.Check, srcs ...string) F.Check {
	return func(rs []F.Result) error {
		if err := inner(rs); err != nil {
			return err
		}
		for _, r := range rs {
			if !slices.Contains(srcs, r.Src) {
				return fmt.Errorf("%s saw the client as %s, want one of %v", r.Pod, r.Src, srcs)
			}
		}
		return nil
	}
}

// sourcePerPod additionally checks the client address each pod saw.
func sourcePerPod(inner F.Check, src map[string]string) F.Check {
	return func(rs []F.Result) error {
		if err := inner(rs); err != nil {
			return err
		}
		for _, r := range rs {
			if want, ok := src[r.Pod]; ok && r.Src != want {
				return fmt.Errorf("%s saw the client as %s, want %s", r.Pod, r.Src, want)
			}
		}
		return nil
	}
}

// inRules reports whether ip appears in node n's ruleset as a whole address.
func inRules(t *testing.T, c *F.Cluster, n *F.Node, ip string) bool {
	t.Helper()
	rules, err := c.Ruleset(n)
	if err != nil {
		t.Fatal(err)
	}
	return regexp.MustCompile(`(^|[^0-9.])` + regexp.QuoteMeta(ip) + `([^0-9]|$)`).MatchString(rules)
}

// testFrontends: ClusterIP from pods on both nodes, NodePort on both nodes,
// an externalIP and a LoadBalancer IP from outside and from a pod, over TCP
// and UDP; eTP=Cluster traffic from outside is masqueraded.
func testFrontends(t *testing.T, c *F.Cluster) {
	n1, n2 := c.Nodes[0], c.Nodes[1]
	a, b := c.AddPod(n1, "fa"), c.AddPod(n2, "fb")
	svc := F.NewService("front", corev1.ServiceTypeLoadBalancer)
	svc.Spec.ExternalIPs = []string{F.ExternalNet + ".10"}
	svc = c.CreateService(svc)
	svc = c.SetLoadBalancerIP(svc, F.LBNet+".10")
	c.SetEndpoints(svc, F.EP{Pod: a}, F.EP{Pod: b})

	both := F.AllOf("fa", "fb")
	for _, from := range []string{"cli1", "cli2"} {
		for _, tg := range frontends(svc, svc.Spec.ClusterIP, false) {
			c.Expect(from, tg, converge, both)
		}
	}
	for _, n := range c.Nodes {
		for _, tg := range frontends(svc, n.IP, true) {
			c.Expect("ext", tg, converge, both)
		}
	}
	for _, ip := range []string{F.ExternalNet + ".10", F.LBNet + ".10"} {
		for _, tg := range frontends(svc, ip, false) {
			c.Expect("ext", tg, converge, both)
			c.Expect("cli2", tg, converge, both)
		}
	}
	// eTP=Cluster: the outside client is masqueraded to an address of the
	// node it entered: its node-network address toward the other node's
	// pod, the pod-side gateway toward its own; with the tc programs
	// (no nftables rules) its own pod sees the client (docs/design/0009-ebpf-without-nftables.md).
	tcp, np := port(svc, corev1.ProtocolTCP)
	local := n2.PodNet + ".1"
	if c.TCServes(n2) {
		local = F.ExtIP
	}
	c.Expect("ext", F.TCP(n2.IP, np), converge, sourcePerPod(both, map[string]string{"fa": n2.IP, "fb": local}))
	// From a pod to a ClusterIP: no masquerade, the pod's own address.
	c.Expect("cli1", F.TCP(svc.Spec.ClusterIP, tcp), converge, sourceIs(both, n1.PodNet+".100"))
}

// testUpdatesAndDeletes: endpoint changes, a Service port change, an added
// externalIP, slice deletion (REJECT) and Service deletion (rules gone).
func testUpdatesAndDeletes(t *testing.T, c *F.Cluster) {
	n1, n2 := c.Nodes[0], c.Nodes[1]
	a, b := c.AddPod(n1, "ua"), c.AddPod(n2, "ub")
	svc := c.CreateService(F.NewService("upd", corev1.ServiceTypeClusterIP))
	ip := svc.Spec.ClusterIP
	c.SetEndpoints(svc, F.EP{Pod: a})
	c.Expect("cli1", F.TCP(ip, 80), converge, F.OnlyBy("ua"))
	c.SetEndpoints(svc, F.EP{Pod: b})
	c.Expect("cli1", F.TCP(ip, 80), converge, F.AllOf("ub"))
	c.Expect("cli2", F.UDP(ip, 80), converge, F.AllOf("ub"))

	svc = c.UpdateService("upd", func(s *corev1.Service) {
		for i := range s.Spec.Ports {
			s.Spec.Ports[i].Port = 81
		}
		s.Spec.ExternalIPs = []string{F.ExternalNet + ".20"}
	})
	c.Expect("cli1", F.TCP(ip, 81), converge, F.AllOf("ub"))
	c.Expect("cli1", F.TCP(ip, 80), converge, F.Failing(""))
	c.Expect("ext", F.TCP(F.ExternalNet+".20", 81), converge, F.AllOf("ub"))

	ctx, cancel := c.Ctx(20 * time.Second)
	defer cancel()
	if err := c.Admin.DiscoveryV1().EndpointSlices(F.Namespace).Delete(ctx, "upd-e2e", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	c.Expect("cli1", F.TCP(ip, 81), converge, F.Refused())
	c.Expect("cli1", F.UDP(ip, 81), converge, F.Refused())
	c.SetEndpoints(svc, F.EP{Pod: a})
	c.Expect("cli1", F.TCP(ip, 81), converge, F.AllOf("ua"))

	c.DeleteService("upd")
	c.Expect("cli1", F.TCP(ip, 81), converge, F.Failing(""))
	for _, n := range c.Nodes {
		waitRules(t, c, n, ip, false)
	}
}

// waitRules waits until ip is (present) or is not in node n's ruleset.
func waitRules(t *testing.T, c *F.Cluster, n *F.Node, ip string, present bool) {
	t.Helper()
	deadline := time.Now().Add(converge)
	for inRules(t, c, n, ip) != present {
		if time.Now().After(deadline) {
			t.Fatalf("%s: %s in the ruleset = %t after %v, want %t", n.Name, ip, !present, converge, present)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// testScaleToZero: no endpoints → connections refused (TCP RST / ICMP for
// UDP) on ClusterIP and NodePort; endpoints back → served again.
func testScaleToZero(t *testing.T, c *F.Cluster) {
	n1 := c.Nodes[0]
	a := c.AddPod(n1, "za")
	svc := c.CreateService(F.NewService("zero", corev1.ServiceTypeNodePort))
	c.SetEndpoints(svc, F.EP{Pod: a})
	targets := append(frontends(svc, svc.Spec.ClusterIP, false), frontends(svc, n1.IP, true)...)
	for _, tg := range targets {
		c.Expect("cli1", tg, converge, F.AllOf("za"))
	}
	c.SetEndpoints(svc)
	for _, tg := range targets {
		c.Expect("cli1", tg, converge, F.Refused())
	}
	for _, tg := range frontends(svc, c.Nodes[1].IP, true) {
		c.Expect("ext", tg, converge, F.Refused())
	}
	c.SetEndpoints(svc, F.EP{Pod: a})
	for _, tg := range targets {
		c.Expect("cli1", tg, converge, F.AllOf("za"))
	}
	for _, tg := range frontends(svc, c.Nodes[1].IP, true) {
		c.Expect("ext", tg, converge, F.AllOf("za"))
	}
}
