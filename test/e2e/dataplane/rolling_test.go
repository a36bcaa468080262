package dataplane

import (
	"encoding/json"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	F "github.com/svcproxy/svcproxy/test/e2e/framework"
)

// noFailures fails the test if any request of a load failed.
func noFailures(t *testing.T, what string, rs []F.Result, min int) {
	t.Helper()
	if len(rs) < min {
		t.Fatalf("%s: only %d requests were made (want ≥ %d): the load generator did not run", what, len(rs), min)
	}
	if bad := F.Failures(rs); len(bad) > 0 {
		t.Fatalf("%s: %d of %d requests failed, first at %d ms: %s", what, len(bad), len(rs), bad[0].MS, bad[0])
	}
	t.Logf("%s: %d requests, 0 failed", what, len(rs))
}

// testRollingReplacement replaces an endpoint the way a Deployment
// rollout does (new pod ready; old one terminating but serving; old one
// gone from the slice; only then its process stops) under steady load
// from a pod and from outside: not one connection may fail.
func testRollingReplacement(t *testing.T, c *F.Cluster) {
	n1, n2 := c.Nodes[0], c.Nodes[1]
	a, b := c.AddPod(n1, "ra"), c.AddPod(n2, "rb")
	svc := c.CreateService(F.NewService("roll", corev1.ServiceTypeNodePort))
	c.SetEndpoints(svc, F.EP{Pod: a}, F.EP{Pod: b})
	ip := svc.Spec.ClusterIP
	_, np := port(svc, corev1.ProtocolTCP)
	c.Expect("cli1", F.TCP(ip, 80), converge, F.AllOf("ra", "rb"))
	c.Expect("ext", F.TCP(n2.IP, np), converge, F.AllOf("ra", "rb"))

	inside := c.StartLoad("cli1", F.TCP(ip, 80), 20*time.Millisecond, false)
	outside := c.StartLoad("ext", F.TCP(n2.IP, np), 20*time.Millisecond, false)
	newB := c.AddPod(n2, "rb2")
	c.SetEndpoints(svc, F.EP{Pod: a}, F.EP{Pod: b}, F.EP{Pod: newB})
	c.Expect("cli2", F.TCP(ip, 80), converge, F.AllOf("ra", "rb", "rb2"))
	c.SetEndpoints(svc, F.EP{Pod: a}, F.EP{Pod: b, NotReady: true, Terminating: true}, F.EP{Pod: newB})
	c.Expect("cli2", F.TCP(ip, 80), converge, F.AllOf("ra", "rb2"))
	c.SetEndpoints(svc, F.EP{Pod: a}, F.EP{Pod: newB})
	time.Sleep(2 * time.Second) // the slice change reaches every node before the pod dies
	c.RemovePod(b)
	time.Sleep(2 * time.Second)
	noFailures(t, "pod → ClusterIP during the rollout", inside.Stop(), 50)
	noFailures(t, "outside → NodePort during the rollout", outside.Stop(), 50)
}

// testUDPReplacement: a long-lived UDP flow (one client socket) to a
// Service whose only server pod is replaced. The flow's conntrack entry
// points at the old pod; svcproxy must clear it so the same flow reaches
// the new pod.
func testUDPReplacement(t *testing.T, c *F.Cluster) {
	old := c.AddPod(c.Nodes[1], "uo")
	svc := c.CreateService(F.NewService("udpflow", corev1.ServiceTypeClusterIP))
	c.SetEndpoints(svc, F.EP{Pod: old})
	udpFlowFollows(t, c, "cli1", F.UDP(svc.Spec.ClusterIP, 80), svc, old, "un")
}

// testUDPNodePortReplacement: the same from outside, one socket sending to
// node1's node port while its endpoint on node2 is replaced: the flow
// moves as the conntrack cleanup deletes it (with ebpf mode's tc programs,
// from their own table).
func testUDPNodePortReplacement(t *testing.T, c *F.Cluster) {
	old := c.AddPod(c.Nodes[1], "no")
	svc := c.CreateService(F.NewService("udpnp", corev1.ServiceTypeNodePort))
	c.SetEndpoints(svc, F.EP{Pod: old})
	_, np := port(svc, corev1.ProtocolUDP)
	udpFlowFollows(t, c, "ext", F.UDP(c.Nodes[0].IP, np), svc, old, "nn")
}

// udpFlowFollows keeps one UDP socket of from asking tg, served by old,
// replaces old by a new pod on its node, and waits for the flow to reach it.
func udpFlowFollows(t *testing.T, c *F.Cluster, from string, tg F.Target, svc *corev1.Service, old *F.Pod, replacement string) {
	c.Expect(from, tg, converge, F.AllOf(old.Name))
	flow := c.StartLoad(from, tg, 50*time.Millisecond, true)
	time.Sleep(time.Second)
	if rs := flow.Snapshot(); len(rs) == 0 || !rs[len(rs)-1].OK || rs[len(rs)-1].Pod != old.Name {
		t.Fatalf("the flow does not reach the old pod: %v", rs)
	}
	c.SetEndpoints(svc, F.EP{Pod: c.AddPod(old.Node, replacement)})
	c.RemovePod(old)
	t0 := time.Now()
	for {
		rs := flow.Snapshot()
		if n := len(rs); n >= 5 && lastAllFrom(rs[n-5:], replacement) {
			t.Logf("the flow reached the new pod %v after the switch", time.Since(t0).Round(100*time.Millisecond))
			break
		}
		if time.Since(t0) > converge {
			rs := flow.Stop()
			t.Fatalf("the UDP flow did not move to the new pod within %v; last answers: %v", converge, tail(rs, 8))
		}
		time.Sleep(200 * time.Millisecond)
	}
	flow.Stop()
}

func lastAllFrom(rs []F.Result, pod string) bool {
	for _, r := range rs {
		if !r.OK || r.Pod != pod {
			return false
		}
	}
	return true
}

func tail(rs []F.Result, n int) []F.Result {
	if len(rs) > n {
		return rs[len(rs)-n:]
	}
	return rs
}

// testIgnoredLabels: Services (and their slices) labelled
// service.kubernetes.io/service-proxy-name or service.kubernetes.io/headless
// are not svcproxy's: no rules at all; dropping the label brings them in.
func testIgnoredLabels(t *testing.T, c *F.Cluster) {
	n1 := c.Nodes[0]
	a := c.AddPod(n1, "ga")
	control := c.CreateService(F.NewService("claimed", corev1.ServiceTypeClusterIP))
	c.SetEndpoints(control, F.EP{Pod: a})
	labels := map[string]string{"service.kubernetes.io/service-proxy-name": "someone-else",
		"service.kubernetes.io/headless": ""}
	ignored := map[string]*corev1.Service{}
	for key, value := range labels {
		name := map[bool]string{true: "other-proxy", false: "headless-label"}[key != "service.kubernetes.io/headless"]
		svc := F.NewService(name, corev1.ServiceTypeClusterIP)
		svc.Labels = map[string]string{key: value}
		svc = c.CreateService(svc)
		slice := F.Slice(svc, F.EP{Pod: a}) // the slice controller copies the Service's labels
		slice.Labels[key] = value
		if err := c.ApplySlice(slice); err != nil {
			t.Fatal(err)
		}
		ignored[key] = svc
	}
	c.Expect("cli1", F.TCP(control.Spec.ClusterIP, 80), converge, F.AllOf("ga"))
	time.Sleep(2 * time.Second) // a sync after the control one would have added them too
	for key, svc := range ignored {
		for _, n := range c.Nodes {
			if inRules(t, c, n, svc.Spec.ClusterIP) {
				t.Errorf("%s: Service %s (label %s) has rules", n.Name, svc.Name, key)
			}
		}
		c.Expect("cli1", F.TCP(svc.Spec.ClusterIP, 80), converge, F.Failing(""))
	}
	for key, svc := range ignored {
		c.UpdateService(svc.Name, func(s *corev1.Service) { delete(s.Labels, key) })
		slice := F.Slice(svc, F.EP{Pod: a})
		if err := c.ApplySlice(slice); err != nil {
			t.Fatal(err)
		}
		c.Expect("cli1", F.TCP(svc.Spec.ClusterIP, 80), converge, F.AllOf("ga"))
	}
}

// testMalformedSlice: a slice with addresses svcproxy cannot use must not
// disturb other Services: they keep working, their later changes are
// applied, svcproxy stays up and healthy. kube-apiserver v1.37 refuses
// such addresses, so the slice is written into etcd directly (PutRaw).
func testMalformedSlice(t *testing.T, c *F.Cluster) {
	n1, n2 := c.Nodes[0], c.Nodes[1]
	a, b := c.AddPod(n1, "ma"), c.AddPod(n2, "mb")
	good := c.CreateService(F.NewService("good", corev1.ServiceTypeClusterIP))
	c.SetEndpoints(good, F.EP{Pod: a})
	c.Expect("cli1", F.TCP(good.Spec.ClusterIP, 80), converge, F.AllOf("ma"))

	bad := c.CreateService(F.NewService("bad", corev1.ServiceTypeClusterIP))
	if err := c.ApplySlice(F.Slice(bad, F.EP{Pod: a, Address: "not-an-ip"})); err == nil {
		t.Log("the API server accepted address \"not-an-ip\" itself")
	}
	s := F.Slice(bad, F.EP{Pod: a, Address: "not-an-ip"}, F.EP{Pod: a, Address: "010.244.001.010"},
		F.EP{Pod: b, Address: "10.244.2.300"})
	s.APIVersion, s.Kind = "discovery.k8s.io/v1", "EndpointSlice"
	s.UID, s.CreationTimestamp = types.UID("e2e-malformed-slice"), metav1.Now()
	raw, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.PutRaw("/registry/endpointslices/"+F.Namespace+"/"+s.Name, raw); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := c.Ctx(20 * time.Second)
	defer cancel()
	got, err := c.Admin.DiscoveryV1().EndpointSlices(F.Namespace).Get(ctx, s.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("the raw slice is not served by the API: %v", err)
	}
	t.Logf("slice %s as served: addresses %v", got.Name, addresses(got))

	c.SetEndpoints(good, F.EP{Pod: a}, F.EP{Pod: b})
	c.Expect("cli1", F.TCP(good.Spec.ClusterIP, 80), converge, F.AllOf("ma", "mb"))
	c.Expect("cli2", F.UDP(good.Spec.ClusterIP, 80), converge, F.AllOf("ma", "mb"))
	for _, n := range c.Nodes {
		if !n.Proxy.Alive() {
			t.Fatalf("svcproxy on %s exited:\n%s", n.Name, n.Proxy.Tail(3000))
		}
		if err := c.WaitHealthz(n, 200, converge); err != nil {
			t.Fatal(err)
		}
	}
	rs := c.Ask("cli1", F.TCP(bad.Spec.ClusterIP, 80), 3, time.Second)
	t.Logf("the malformed Service itself answers: %v", rs)
	c.DeleteService("bad")
}

func addresses(s *discoveryv1.EndpointSlice) []string {
	var out []string
	for _, e := range s.Endpoints {
		out = append(out, e.Addresses...)
	}
	return out
}
