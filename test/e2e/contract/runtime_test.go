package contract

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	F "github.com/svcproxy/svcproxy/test/e2e/framework"
)

// TestRuntime runs svcproxy on node-1 and upstream kube-proxy on node-2 of
// one throwaway cluster (real kube-apiserver, nodes in network namespaces,
// nftables mode, the same configuration file shape), gives both the same
// Services, and compares what they serve: /metrics families, the change
// counters' values after the same events, the health and metrics-port
// endpoints, the healthCheckNodePort answer and the Events; then again
// without a mode (iptables) and with the localhost node-port gate on; last,
// with the health and metrics ports taken (comparePortsTaken).
func TestRuntime(t *testing.T) {
	b := buildBinaries(t)
	diffs := loadDifferences(t)
	c := F.New(t, F.Options{Mode: "nftables", Nodes: 2, NoProxy: true, SyncPeriod: 5 * time.Second})
	n1, n2 := c.Nodes[0], c.Nodes[1]
	svc := F.NewService("local", corev1.ServiceTypeLoadBalancer)
	svc.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal
	svc = c.CreateService(svc)
	eps := []F.EP{{Pod: c.AddPod(n1, "ra")}, {Pod: c.AddPod(n2, "rb")}}
	c.SetEndpoints(svc, eps...)
	// round starts both proxies over the nodes' current configs and
	// compares them; the change counters are compared after round's event.
	round := func(name string, event int) {
		if err := c.StartProxy(n1); err != nil {
			t.Fatal(err)
		}
		upstream := startKubeProxy(t, c, n2, b.kubeProxy)
		waitBoth(t, c, svc.Spec.HealthCheckNodePort, n1, n2)
		t.Run(name, func(t *testing.T) {
			t.Run("metrics", func(t *testing.T) { compareMetrics(t, c, n2, n1, diffs) })
			t.Run("endpoints", func(t *testing.T) { compareEndpoints(t, c, n2, n1, svc.Spec.HealthCheckNodePort, diffs) })
			t.Run("changes", func(t *testing.T) { compareChangeCounters(t, c, n2, n1, svc, eps, event, diffs) })
		})
		if name == "default-mode" {
			t.Run("events", func(t *testing.T) { compareEvents(t, c, n2, n1, diffs) })
		}
		n1.Proxy.Stop(5 * time.Second)
		upstream.Stop(5 * time.Second)
	}
	round("nftables", 1)
	// Then both again without a mode: upstream 1.37 defaults to iptables,
	// warns (KEP-5343) and records a KubeProxyDefaultMode event.
	for _, n := range []*F.Node{n1, n2} {
		dropMode(t, n.Config)
	}
	round("default-mode", 2)
	// Then nftables with KEP-6032's alpha gate and loopback among the
	// node-port addresses: the userspace localhost proxy and its metrics.
	for _, n := range []*F.Node{n1, n2} {
		appendConfig(t, n.Config, localhostNodePortsConfig)
	}
	round("localhost-nodeports", 3)
	// Last, the listener failures: both ports taken before either starts,
	// without and then with bindAddressHardFail.
	t.Run("ports-taken", func(t *testing.T) { comparePortsTaken(t, c, b, n2, n1, diffs) })
	diffs.checkUsed(t, "metric ")
	diffs.checkUsed(t, "endpoint ")
}

// waitBoth waits until both nodes answer /healthz and the
// healthCheckNodePort with 200, and have finished a sync of each family.
func waitBoth(t *testing.T, c *F.Cluster, hcnp int32, nodes ...*F.Node) {
	t.Helper()
	for _, n := range nodes {
		if err := c.WaitHealthz(n, 200, 60*time.Second); err != nil {
			t.Fatalf("%s: %v", n.Name, err)
		}
		waitHCNP(t, c, n, hcnp)
		waitSynced(t, c, n)
	}
}

// waitSynced waits until n's /metrics shows a finished sync of both
// families. Neither /healthz (200 from the start) nor the
// healthCheckNodePort (opened early in upstream's first sync, before the
// sync histogram is observed) says that a sync has finished; without this
// wait the metrics comparison raced upstream's first iptables sync.
func waitSynced(t *testing.T, c *F.Cluster, n *F.Node) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		text, err := c.Metrics(n)
		if err == nil && strings.Contains(text, `kubeproxy_sync_proxy_rules_duration_seconds_count{ip_family="IPv4"}`) &&
			strings.Contains(text, `kubeproxy_sync_proxy_rules_duration_seconds_count{ip_family="IPv6"}`) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: no finished sync of both families in /metrics after 60 s (%v)", n.Name, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// localhostNodePortsConfig turns on upstream's alpha localhost node ports
// (nftables mode) with loopback named in nodePortAddresses.
const localhostNodePortsConfig = `mode: nftables
featureGates:
  KubeProxyNFTablesLocalhostNodePorts: true
nodePortAddresses: [primary, localhost]
`

// appendConfig adds top-level fields to a configuration file.
func appendConfig(t *testing.T, path, fields string) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteString("\n" + fields); err != nil {
		t.Fatal(err)
	}
}

// dropMode removes the mode line from a configuration file.
func dropMode(t *testing.T, path string) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var keep []string
	for _, line := range strings.Split(string(data), "\n") {
		if !strings.HasPrefix(line, "mode:") {
			keep = append(keep, line)
		}
	}
	if err := os.WriteFile(path, []byte(strings.Join(keep, "\n")), 0o644); err != nil {
		t.Fatal(err)
	}
}

// startKubeProxy runs upstream kube-proxy on n with the configuration the
// framework writes for svcproxy (StartProxy writes it; that svcproxy is
// stopped again before kube-proxy starts). The process is stopped at the
// end of the test if still running.
func startKubeProxy(t *testing.T, c *F.Cluster, n *F.Node, bin string) *F.Proc {
	t.Helper()
	if n.Config == "" {
		if err := c.StartProxy(n); err != nil {
			t.Fatal(err)
		}
		n.Proxy.Stop(5 * time.Second)
		// WaitHealthz would take that stopped svcproxy for this node's proxy.
		n.Proxy = nil
	}
	logPath := filepath.Join(c.Work, "logs", "kube-proxy-"+n.Name+".log")
	p, err := F.Start("kube-proxy-"+n.Name, n.NS, logPath, bin, "--config", n.Config, "-v=2")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Stop(5 * time.Second) })
	return p
}

// waitHCNP waits until the healthCheckNodePort on n answers 200.
func waitHCNP(t *testing.T, c *F.Cluster, n *F.Node, port int32) {
	t.Helper()
	url := fmt.Sprintf("http://%s:%d/", n.IP, port)
	deadline := time.Now().Add(60 * time.Second)
	for {
		code, body, err := F.HTTPGet(c.NS("ext"), url, 2*time.Second)
		if err == nil && code == 200 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s on %s: %d %q %v", url, n.Name, code, body, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// compareEvents compares, by reason, the Events each proxy recorded about
// its Node (type, action and reporting controller).
func compareEvents(t *testing.T, c *F.Cluster, up, ours *F.Node, diffs *differences) {
	byNode := map[string]map[string]string{up.Name: {}, ours.Name: {}}
	for _, e := range listEvents(t, c) {
		if e.Regarding.Kind != "Node" || byNode[e.Regarding.Name] == nil {
			continue
		}
		byNode[e.Regarding.Name][e.Reason] = fmt.Sprintf("%s/%s/%s", e.Type, e.Action, e.ReportingController)
	}
	reasons := map[string]bool{}
	for _, m := range byNode {
		for r := range m {
			reasons[r] = true
		}
	}
	t.Logf("events about the nodes: upstream %v, svcproxy %v", byNode[up.Name], byNode[ours.Name])
	if len(byNode[up.Name]) == 0 {
		t.Fatal("upstream recorded no Events about its Node; the comparison would be empty")
	}
	for _, r := range sortedKeys(reasons) {
		u, o := byNode[up.Name][r], byNode[ours.Name][r]
		if u != o {
			diffs.report(t, "endpoint event "+r, []string{fmt.Sprintf("event %s: upstream %q, svcproxy %q", r, u, o)})
		}
	}
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// trimmed is a body for messages.
func trimmed(s string) string {
	s = strings.TrimSpace(s)
	if len(s) > 300 {
		s = s[:300] + "..."
	}
	return s
}
