package dataplane

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	F "github.com/svcproxy/svcproxy/test/e2e/framework"
)

// Series of node 1's IPv4 syncer: the ports it keeps out, and how many
// syncs it has made since the process started.
const (
	quarantinedV4 = `svcproxy_quarantined_service_ports{ip_family="IPv4"}`
	syncsV4       = `kubeproxy_sync_proxy_rules_duration_seconds_count{ip_family="IPv4"}`
)

// testRestartWithPoisonService restarts node 1's svcproxy while a Service
// its kernel refuses is present, first with SIGTERM, then with SIGKILL (a
// crash), and pods and an outside client keep connecting to healthy
// Services through node 1 in both families and over UDP. The refusal comes from the
// fault-injecting build (pkg/testing/faultinject), which node 1 runs from the
// first restart on: the release build programmed the poison before, so the
// first start meets a poison it has never seen, with no quarantine file,
// and the second one starts from the file the first one left. Not one
// connection to the healthy Services may fail, the poison must be
// quarantined by the first sync or the one after it, and the healthy
// Services follow the API afterwards.
func testRestartWithPoisonService(t *testing.T, c *F.Cluster) {
	n1, n2 := c.Nodes[0], c.Nodes[1]
	a, b := c.AddPod(n1, "pra"), c.AddPod(n2, "prb")
	svc, v4, v6 := dualStackNodePort(t, c, "poison-restart", F.EP{Pod: a}, F.EP{Pod: b})
	_, np := port(svc, corev1.ProtocolTCP)
	poison := c.CreateService(F.NewService("kernel-poison-restart", corev1.ServiceTypeLoadBalancer))
	poison = c.SetLoadBalancerIP(poison, F.LBNet+".38")
	c.SetEndpoints(poison, F.EP{Pod: a})
	// The release build programs what the fault-injecting one refuses.
	c.Expect("cli1", F.TCP(poison.Spec.ClusterIP, 80), converge, F.AllOf("pra"))

	loads := startLoads(t, c, throughNode(n1, v4, v6, np), "pra", "prb")
	n1.Bin = F.FaultInjectBinary(t)
	t.Cleanup(func() { n1.Bin = "" })
	for _, how := range []string{"SIGTERM", "SIGKILL"} {
		if how == "SIGTERM" {
			n1.Proxy.Stop(10 * time.Second)
		} else {
			n1.Proxy.Kill()
		}
		if err := c.StartProxy(n1); err != nil {
			t.Fatal(err)
		}
		expectQuarantinedWithin(t, c, n1, how, 2)
		waitBothFamiliesSynced(t, c, n1)
	}
	time.Sleep(2 * time.Second)
	for what, l := range loads {
		noFailures(t, what+" across a SIGTERM and a SIGKILL restart with a poison Service", l.Stop(), 100)
	}
	for _, ip := range []string{poison.Spec.ClusterIP, F.LBNet + ".38"} {
		if rs := c.Ask("cli1", F.TCP(ip, 80), 2, time.Second); F.Failing("")(rs) != nil {
			t.Errorf("%s: the quarantined Service answers on %s: %v", n1.Name, ip, rs)
		}
	}
	expectOnlyQuarantined(t, c, n1, poison.Name, svc.Name)
	// Node 1 follows the API for the healthy Services.
	c.SetEndpoints(svc, F.EP{Pod: a})
	c.Expect("ext", F.TCP(n1.IP, np), converge, F.AllOf("pra"))

	// The rest of the suite runs the release build again, without the poison.
	c.DeleteService(poison.Name)
	n1.Bin = ""
	n1.Proxy.Stop(10 * time.Second)
	if err := c.StartProxy(n1); err != nil {
		t.Fatal(err)
	}
	waitBothFamiliesSynced(t, c, n1)
}

// loadTarget is where a load runs from and what it asks.
type loadTarget struct {
	from string
	tg   F.Target
}

// throughNode is where the load of a dual-stack NodePort Service (cluster
// IPs v4 and v6, node port np) goes through node n: TCP to both cluster IPs
// and UDP to the IPv4 one from the pod client on node 1, TCP to the node
// port from outside.
func throughNode(n *F.Node, v4, v6 string, np int32) map[string]loadTarget {
	return map[string]loadTarget{
		"pod → ClusterIP":        {"cli1", F.TCP(v4, 80)},
		"pod → ClusterIP (IPv6)": {"cli1", F.TCP(v6, 80)},
		"pod → ClusterIP (UDP)":  {"cli1", F.UDP(v4, 80)},
		"outside → NodePort":     {"ext", F.TCP(n.IP, np)},
	}
}

// startLoads waits until each target answers from every one of pods, then
// starts a request every 20 ms to it.
func startLoads(t *testing.T, c *F.Cluster, targets map[string]loadTarget, pods ...string) map[string]*F.Load {
	t.Helper()
	loads := map[string]*F.Load{}
	for what, x := range targets {
		c.Expect(x.from, x.tg, converge, F.AllOf(pods...))
		loads[what] = c.StartLoad(x.from, x.tg, 20*time.Millisecond, false)
	}
	time.Sleep(time.Second)
	return loads
}

// expectQuarantinedWithin polls n's /metrics from its start until the IPv4
// syncer reports a quarantined port, and fails unless it did within
// maxSyncs syncs of the new process (the first, and one extra).
func expectQuarantinedWithin(t *testing.T, c *F.Cluster, n *F.Node, how string, maxSyncs float64) {
	t.Helper()
	t0 := time.Now()
	for {
		text, err := c.Metrics(n)
		if err == nil && sample(text, quarantinedV4) >= 1 {
			syncs := sample(text, syncsV4)
			t.Logf("after the %s restart: the poison quarantined %v after the start, at sync %v",
				how, time.Since(t0).Round(time.Millisecond), syncs)
			if syncs > maxSyncs {
				t.Errorf("after the %s restart: the poison quarantined only at sync %v, want within %v", how, syncs, maxSyncs)
			}
			return
		}
		if time.Since(t0) > converge {
			t.Fatalf("after the %s restart: no quarantined port within %v (err %v): %s",
				how, converge, err, grepLines(text, "quarantined"))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// expectOnlyQuarantined checks that `svcproxy services --quarantined` on n
// lists Service poison's ports and none of Service healthy's.
func expectOnlyQuarantined(t *testing.T, c *F.Cluster, n *F.Node, poison, healthy string) {
	t.Helper()
	out, err := svcproxyCLI(c, n, "services", "--quarantined")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, "/"+poison+":") || strings.Contains(out, "/"+healthy+":") {
		t.Errorf("%s: services --quarantined does not list %s alone (without %s):\n%s", n.Name, poison, healthy, out)
	}
}
