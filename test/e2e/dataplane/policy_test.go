package dataplane

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	F "github.com/svcproxy/svcproxy/test/e2e/framework"
)

// expectHCNP waits until the healthCheckNodePort on node n answers want
// with localEndpoints == local.
func expectHCNP(t *testing.T, c *F.Cluster, n *F.Node, hcnp int32, want, local int) {
	t.Helper()
	url := fmt.Sprintf("http://%s:%d/", n.IP, hcnp)
	deadline := time.Now().Add(converge)
	for {
		code, body, err := F.HTTPGet(c.NS("ext"), url, 2*time.Second)
		var got struct {
			LocalEndpoints int `json:"localEndpoints"`
		}
		if err == nil && code == want && json.Unmarshal([]byte(body), &got) == nil && got.LocalEndpoints == local {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s on %s: got %d %q (%v), want %d with localEndpoints %d", url, n.Name, code,
				strings.TrimSpace(body), err, want, local)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// testETPLocal: externalTrafficPolicy Local on a LoadBalancer Service.
// Outside clients keep their address and reach only local endpoints; a
// node without one drops them and its healthCheckNodePort says 503; pods
// are short-circuited to every endpoint.
func testETPLocal(t *testing.T, c *F.Cluster) {
	n1, n2 := c.Nodes[0], c.Nodes[1]
	a := c.AddPod(n1, "la")
	svc := F.NewService("local", corev1.ServiceTypeLoadBalancer)
	svc.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal
	svc = c.CreateService(svc)
	svc = c.SetLoadBalancerIP(svc, F.LBNet+".20")
	hcnp := svc.Spec.HealthCheckNodePort
	if hcnp == 0 {
		t.Fatal("the API server allocated no healthCheckNodePort")
	}
	c.SetEndpoints(svc, F.EP{Pod: a})
	expectHCNP(t, c, n1, hcnp, 200, 1)
	expectHCNP(t, c, n2, hcnp, 503, 0)

	keepsSource := sourceIs(F.AllOf("la"), F.ExtIP)
	for _, tg := range frontends(svc, n1.IP, true) {
		c.Expect("ext", tg, converge, keepsSource)
	}
	for _, tg := range frontends(svc, F.LBNet+".20", false) { // routed to node1
		c.Expect("ext", tg, converge, keepsSource)
	}
	_, np := port(svc, corev1.ProtocolTCP)
	c.Expect("ext", F.TCP(n2.IP, np), converge, F.Failing("timeout"))
	// A pod on node2 going to the LB IP is short-circuited to the cluster set.
	c.Expect("cli2", F.TCP(F.LBNet+".20", 80), converge, F.AllOf("la"))

	b := c.AddPod(n2, "lb")
	c.SetEndpoints(svc, F.EP{Pod: a}, F.EP{Pod: b})
	expectHCNP(t, c, n2, hcnp, 200, 1)
	c.Expect("ext", F.TCP(n2.IP, np), converge, sourceIs(F.AllOf("lb"), F.ExtIP))
	// A terminating (serving, not ready) local endpoint is not counted: LBs drain.
	c.SetEndpoints(svc, F.EP{Pod: a}, F.EP{Pod: b, NotReady: true, Terminating: true})
	expectHCNP(t, c, n2, hcnp, 503, 0)
}

// testITPLocal: internalTrafficPolicy Local: ClusterIP traffic reaches only
// endpoints on the client's node; none there → dropped.
func testITPLocal(t *testing.T, c *F.Cluster) {
	n1, n2 := c.Nodes[0], c.Nodes[1]
	a, b := c.AddPod(n1, "ia"), c.AddPod(n2, "ib")
	svc := F.NewService("itp", corev1.ServiceTypeClusterIP)
	local := corev1.ServiceInternalTrafficPolicyLocal
	svc.Spec.InternalTrafficPolicy = &local
	svc = c.CreateService(svc)
	c.SetEndpoints(svc, F.EP{Pod: a}, F.EP{Pod: b})
	ip := svc.Spec.ClusterIP
	c.Expect("cli1", F.TCP(ip, 80), converge, F.AllOf("ia"))
	c.Expect("cli2", F.TCP(ip, 80), converge, F.AllOf("ib"))
	c.Expect("cli2", F.UDP(ip, 80), converge, F.AllOf("ib"))
	c.SetEndpoints(svc, F.EP{Pod: a})
	c.Expect("cli2", F.TCP(ip, 80), converge, F.Failing("timeout"))
	c.Expect("cli1", F.TCP(ip, 80), converge, F.AllOf("ia"))
}

// testPreferClose: trafficDistribution PreferClose with zone hints on the
// slice keeps traffic in the client's zone; without hints it spreads.
func testPreferClose(t *testing.T, c *F.Cluster) {
	n1, n2 := c.Nodes[0], c.Nodes[1]
	a, b := c.AddPod(n1, "pa"), c.AddPod(n2, "pb")
	svc := F.NewService("close", corev1.ServiceTypeClusterIP)
	pc := corev1.ServiceTrafficDistributionPreferClose
	svc.Spec.TrafficDistribution = &pc
	svc = c.CreateService(svc)
	ip := svc.Spec.ClusterIP
	c.SetEndpoints(svc, F.EP{Pod: a}, F.EP{Pod: b})
	c.Expect("cli1", F.TCP(ip, 80), converge, F.AllOf("pa", "pb"))
	c.SetEndpoints(svc, F.EP{Pod: a, ZoneHint: n1.Zone}, F.EP{Pod: b, ZoneHint: n2.Zone})
	c.Expect("cli1", F.TCP(ip, 80), converge, F.AllOf("pa"))
	c.Expect("cli2", F.TCP(ip, 80), converge, F.AllOf("pb"))
	c.Expect("cli2", F.UDP(ip, 80), converge, F.AllOf("pb"))
	// Hints that leave a zone out fall back to every endpoint there.
	c.SetEndpoints(svc, F.EP{Pod: a, ZoneHint: n1.Zone}, F.EP{Pod: b, ZoneHint: n1.Zone})
	c.Expect("cli2", F.TCP(ip, 80), converge, F.AllOf("pa", "pb"))
}

// testAffinity: sessionAffinity ClientIP pins a client to one endpoint, on
// the ClusterIP and on a NodePort, over TCP and UDP.
func testAffinity(t *testing.T, c *F.Cluster) {
	n1, n2 := c.Nodes[0], c.Nodes[1]
	pods := []*F.Pod{c.AddPod(n1, "aa"), c.AddPod(n2, "ab"), c.AddPod(n2, "ac")}
	svc := F.NewService("sticky", corev1.ServiceTypeNodePort)
	svc.Spec.SessionAffinity = corev1.ServiceAffinityClientIP
	timeout := int32(300)
	svc.Spec.SessionAffinityConfig = &corev1.SessionAffinityConfig{ClientIP: &corev1.ClientIPConfig{TimeoutSeconds: &timeout}}
	svc = c.CreateService(svc)
	c.SetEndpoints(svc, F.EP{Pod: pods[0]}, F.EP{Pod: pods[1]}, F.EP{Pod: pods[2]})
	targets := map[string][]F.Target{
		"cli1": frontends(svc, svc.Spec.ClusterIP, false),
		"ext":  frontends(svc, n2.IP, true),
	}
	for from, tgs := range targets {
		for _, tg := range tgs {
			c.Expect(from, tg, converge, F.OnlyBy("aa", "ab", "ac"))
			rs := c.Ask(from, tg, 20, time.Second)
			if err := F.OnlyBy("aa", "ab", "ac")(rs); err != nil {
				t.Fatalf("%s → %s: %v", from, tg, err)
			}
			for _, r := range rs[1:] {
				if r.Pod != rs[0].Pod {
					t.Fatalf("%s → %s: affinity broken: %v", from, tg, rs)
				}
			}
		}
	}
}
