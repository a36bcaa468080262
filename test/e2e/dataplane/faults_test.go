package dataplane

import (
	"context"
	"encoding/json"
	"os"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	F "github.com/svcproxy/svcproxy/test/e2e/framework"
)

// testRulesDeleted: a third party deletes svcproxy's rules the way firewall
// reloads and admins do — the whole nftables table, or every iptables chain
// (canaries included) — and they come back within syncPeriod (5 s in these
// clusters) plus a sync, through the backends' canaries. Finer tampering
// (one map element, one rule) is repaired by the next full sync (hourly)
// or a restart, as upstream; the kernel tests cover those repairs.
func testRulesDeleted(t *testing.T, c *F.Cluster) {
	n1 := c.Nodes[0]
	a := c.AddPod(n1, "da")
	svc := c.CreateService(F.NewService("repair", corev1.ServiceTypeClusterIP))
	c.SetEndpoints(svc, F.EP{Pod: a})
	tg := F.TCP(svc.Spec.ClusterIP, 80)
	c.Expect("cli1", tg, converge, F.AllOf("da"))
	limit := c.Opts.SyncPeriod + 10*time.Second

	var breaks map[string][]string
	if F.UsesNFTables(c.Opts.Mode) {
		breaks = map[string][]string{
			"delete table ip kube-proxy": {"nft", "delete", "table", "ip", "kube-proxy"},
		}
	} else {
		breaks = map[string][]string{
			"flush and delete every chain of mangle, nat and filter": {"sh", "-c",
				"for t in mangle nat filter; do iptables -t $t -F && iptables -t $t -X || exit 1; done"},
		}
	}
	names := make([]string, 0, len(breaks))
	for k := range breaks {
		names = append(names, k)
	}
	slices.Sort(names)
	for _, what := range names {
		cmd := breaks[what]
		if out, err := c.Exec(n1, cmd[0], cmd[1:]...); err != nil {
			t.Fatalf("%s: %v %s", what, err, out)
		}
		t0 := time.Now()
		if rs := c.Ask("cli1", tg, 3, time.Second); F.AllOf("da")(rs) == nil {
			t.Logf("%s: traffic still worked right after (repaired at once, or the rule was not needed): %v", what, rs)
		}
		if err := c.Eventually("cli1", tg, 5, limit, F.AllOf("da")); err != nil {
			t.Fatalf("after %q, not restored within syncPeriod %v + 10 s: %v", what, c.Opts.SyncPeriod, err)
		}
		t.Logf("%s: restored after %v", what, time.Since(t0).Round(100*time.Millisecond))
	}
}

// testRestartUnderLoad: svcproxy is killed (SIGKILL, a crash) and started
// again while pods and an outside client keep opening connections through
// that node: the rules stay in the kernel meanwhile and the restart adopts
// them, so not one connection fails.
func testRestartUnderLoad(t *testing.T, c *F.Cluster) {
	n1, n2 := c.Nodes[0], c.Nodes[1]
	a, b := c.AddPod(n1, "sa"), c.AddPod(n2, "sb")
	svc := c.CreateService(F.NewService("steady", corev1.ServiceTypeNodePort))
	c.SetEndpoints(svc, F.EP{Pod: a}, F.EP{Pod: b})
	_, np := port(svc, corev1.ProtocolTCP)
	c.Expect("cli1", F.TCP(svc.Spec.ClusterIP, 80), converge, F.AllOf("sa", "sb"))
	c.Expect("ext", F.TCP(n1.IP, np), converge, F.AllOf("sa", "sb"))

	inside := c.StartLoad("cli1", F.TCP(svc.Spec.ClusterIP, 80), 20*time.Millisecond, false)
	outside := c.StartLoad("ext", F.TCP(n1.IP, np), 20*time.Millisecond, false)
	udp := c.StartLoad("cli1", F.UDP(svc.Spec.ClusterIP, 80), 50*time.Millisecond, false)
	time.Sleep(time.Second)
	n1.Proxy.Kill()
	time.Sleep(2 * time.Second)
	if err := c.StartProxy(n1); err != nil {
		t.Fatal(err)
	}
	if err := c.WaitHealthz(n1, 200, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	time.Sleep(3 * time.Second)
	noFailures(t, "pod → ClusterIP across the restart", inside.Stop(), 100)
	noFailures(t, "outside → NodePort across the restart", outside.Stop(), 100)
	noFailures(t, "pod → ClusterIP (UDP) across the restart", udp.Stop(), 50)
	// And the restarted process still follows the API.
	c.SetEndpoints(svc, F.EP{Pod: a})
	c.Expect("ext", F.TCP(n1.IP, np), converge, F.AllOf("sa"))
}

// outage is how long the API server stays down: 60 s, long enough to cover
// a control-plane upgrade or restore
// (E2E_APISERVER_OUTAGE overrides). By then client-go's own retry backoff
// would have grown to 25–60 s waits, the case that svcproxy's informers
// avoid (pkg/pipeline/watch/reconnect.go).
func outage() time.Duration {
	if d, err := time.ParseDuration(os.Getenv("E2E_APISERVER_OUTAGE")); err == nil {
		return d
	}
	return 60 * time.Second
}

// recoverWithin bounds how long after the API server is ready again (its
// /readyz answers) each node takes to act on changes made then. The
// informers retry an unreachable server every 4–6 s at most, a watch
// resumed across the restart gets 410 Gone and relists after one short
// reflector backoff (0.8–1.6 s), and a sync follows within minSyncPeriod
// (1 s): about 9 s at worst. With client-go's own backoff alone it would be
// up to a minute or more after an outage this long.
const recoverWithin = 15 * time.Second

// testAPIServerOutage: with etcd and kube-apiserver stopped the dataplane
// keeps working and svcproxy keeps running; after they come back, both
// nodes soon apply changes to EndpointSlices and Services, and see their
// Node's taint.
func testAPIServerOutage(t *testing.T, c *F.Cluster) {
	n1, n2 := c.Nodes[0], c.Nodes[1]
	a, b := c.AddPod(n1, "oa"), c.AddPod(n2, "ob")
	svc := c.CreateService(F.NewService("outage", corev1.ServiceTypeNodePort))
	c.SetEndpoints(svc, F.EP{Pod: a}, F.EP{Pod: b})
	tg := F.TCP(svc.Spec.ClusterIP, 80)
	c.Expect("cli1", tg, converge, F.AllOf("oa", "ob"))
	// The load runs from node 2: it must have synced too.
	c.Expect("cli2", tg, converge, F.AllOf("oa", "ob"))

	load := c.StartLoad("cli2", tg, 50*time.Millisecond, false)
	if err := c.StopAPIServer(); err != nil {
		t.Fatal(err)
	}
	restarted := false
	defer func() {
		if !restarted { // leave a working control plane for the next scenario
			_ = c.StartAPIServer()
		}
	}()
	t.Logf("API server down for %v", outage())
	time.Sleep(outage())
	for _, n := range c.Nodes {
		if !n.Proxy.Alive() {
			t.Fatalf("svcproxy on %s exited during the outage:\n%s", n.Name, n.Proxy.Tail(3000))
		}
		if code, _, err := c.Health(n, "/livez"); err != nil || code != 200 {
			t.Errorf("%s /livez during the outage: %d %v", n.Name, code, err)
		}
	}
	noFailures(t, "pod → ClusterIP during the outage", load.Stop(), 100)
	if err := c.StartAPIServer(); err != nil {
		t.Fatal(err)
	}
	restarted = true
	expectRecovery(t, c, svc, a, b)
}

// expectRecovery makes changes right after the API server is ready again
// (the outage Service's endpoints become b alone, a new Service gets a,
// node 2 is tainted for removal) and checks that each node acts on them
// within recoverWithin, logging how long each took.
func expectRecovery(t *testing.T, c *F.Cluster, svc *corev1.Service, a, b *F.Pod) {
	n1, n2 := c.Nodes[0], c.Nodes[1]
	ready := time.Now()
	// The wall clock, to find the moment in the svcproxy logs.
	t.Logf("API server ready at %s", ready.Format("15:04:05.000"))
	c.SetEndpoints(svc, F.EP{Pod: b})
	fresh := c.CreateService(F.NewService("after-outage", corev1.ServiceTypeClusterIP))
	c.SetEndpoints(fresh, F.EP{Pod: a})
	patchNode(t, c, n2.Name, map[string]any{"spec": map[string]any{"taints": []corev1.Taint{
		{Key: "ToBeDeletedByClusterAutoscaler", Value: "1", Effect: corev1.TaintEffectNoSchedule}}}})
	tg, ft := F.TCP(svc.Spec.ClusterIP, 80), F.TCP(fresh.Spec.ClusterIP, 80)
	traffic := func(from string, to F.Target, pod string) func(time.Duration) error {
		return func(limit time.Duration) error { return c.Eventually(from, to, 10, limit, F.AllOf(pod)) }
	}
	deadline := ready.Add(recoverWithin)
	for _, ck := range []struct {
		what string
		wait func(limit time.Duration) error
	}{
		{"node 1: changed EndpointSlice", traffic("cli1", tg, "ob")},
		{"node 1: new Service", traffic("cli1", ft, "oa")},
		{"node 1: changed EndpointSlice, NodePort from outside", traffic("ext", F.TCP(n1.IP, nodePort(svc)), "ob")},
		{"node 2: changed EndpointSlice", traffic("cli2", tg, "ob")},
		{"node 2: new Service", traffic("cli2", ft, "oa")},
		{"node 2: ToBeDeleted taint (/healthz 503)", func(l time.Duration) error { return c.WaitHealth(n2, "/healthz", 503, l) }},
	} {
		// One after the other, so each time is at least the one before;
		// each gets one look, however late.
		if err := ck.wait(max(time.Until(deadline), 200*time.Millisecond)); err != nil {
			t.Errorf("%s: not applied %v after the API server was ready: %v", ck.what, recoverWithin, err)
			continue
		}
		t.Logf("%s: applied %v after the API server was ready", ck.what, time.Since(ready).Round(100*time.Millisecond))
	}
	patchNode(t, c, n2.Name, map[string]any{"spec": map[string]any{"taints": nil}})
	expectHealth(t, c, n2, 200, 200)
}

func nodePort(svc *corev1.Service) int32 {
	_, np := port(svc, corev1.ProtocolTCP)
	return np
}

// testHealthzDraining: /healthz turns 503 on a node that is going away
// (ToBeDeletedByClusterAutoscaler taint; deletionTimestamp, held by a
// finalizer) while /livez stays 200; the other node stays 200. Deleting
// the Node for good makes svcproxy exit, by design (kube-proxy does too),
// so that comes last.
func testHealthzDraining(t *testing.T, c *F.Cluster) {
	n1, n2 := c.Nodes[0], c.Nodes[1]
	patchNode(t, c, n2.Name, map[string]any{"spec": map[string]any{"taints": []corev1.Taint{
		{Key: "ToBeDeletedByClusterAutoscaler", Value: "1", Effect: corev1.TaintEffectNoSchedule}}}})
	expectHealth(t, c, n2, 503, 200)
	expectHealth(t, c, n1, 200, 200)
	patchNode(t, c, n2.Name, map[string]any{"spec": map[string]any{"taints": nil}})
	expectHealth(t, c, n2, 200, 200)

	const finalizer = "e2e.svcproxy.test/hold"
	patchNode(t, c, n2.Name, map[string]any{"metadata": map[string]any{"finalizers": []string{finalizer}}})
	t.Cleanup(func() { // never leave a Node stuck, whatever failed; gone is fine
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		patch := []byte(`{"metadata":{"finalizers":null}}`)
		_, err := c.Admin.CoreV1().Nodes().Patch(ctx, n2.Name, types.MergePatchType, patch, metav1.PatchOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			t.Errorf("releasing Node %s: %v", n2.Name, err)
		}
	})
	ctx, cancel := c.Ctx(20 * time.Second)
	defer cancel()
	if err := c.Admin.CoreV1().Nodes().Delete(ctx, n2.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	expectHealth(t, c, n2, 503, 200)
	expectHealth(t, c, n1, 200, 200)
	patchNode(t, c, n2.Name, map[string]any{"metadata": map[string]any{"finalizers": nil}})
	if exited, err := n2.Proxy.Exited(30 * time.Second); !exited {
		t.Fatalf("svcproxy on %s still runs 30 s after its Node was deleted", n2.Name)
	} else {
		t.Logf("svcproxy on %s exited after its Node was deleted (%v), by design", n2.Name, err)
	}
}

func patchNode(t *testing.T, c *F.Cluster, name string, patch map[string]any) {
	t.Helper()
	data, err := json.Marshal(patch)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, err := c.Admin.CoreV1().Nodes().Patch(ctx, name, types.MergePatchType, data, metav1.PatchOptions{}); err != nil {
		t.Fatalf("patching Node %s: %v", name, err)
	}
}

// expectHealth waits for /healthz = healthz and checks /livez = livez.
func expectHealth(t *testing.T, c *F.Cluster, n *F.Node, healthz, livez int) {
	t.Helper()
	if err := c.WaitHealth(n, "/healthz", healthz, converge); err != nil {
		t.Fatal(err)
	}
	if err := c.WaitHealth(n, "/livez", livez, 5*time.Second); err != nil {
		t.Fatal(err)
	}
}
