package contract

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	F "github.com/svcproxy/svcproxy/test/e2e/framework"
)

// TestNFTablesRollback switches one node between svcproxy and upstream
// kube-proxy v1.37.1 in nftables mode, over the same API state and the same
// configuration file, without deleting the tables in between (what a
// `kubectl rollout undo` of the DaemonSet does): svcproxy from a clean
// start, then upstream (the rollback), then svcproxy over what upstream
// left, then upstream again; last, from a clean start again, upstream and
// then svcproxy taking its table over. After each switch the new proxy's
// syncs must succeed, the Services programmed before must still answer, a
// Service created after the switch must answer within 2 s, and after a
// switch to upstream no base chain other than upstream's may be left
// hooked: upstream replaces only its own base chains, so any other would
// keep steering packets into chains nobody maintains.
func TestNFTablesRollback(t *testing.T) {
	b := buildBinaries(t)
	c := F.New(t, F.Options{Mode: "nftables", Nodes: 1, NoProxy: true, SyncPeriod: 5 * time.Second})
	n := c.Nodes[0]
	before := createRollbackServices(t, c, n)
	sw := &switcher{t: t, c: c, n: n, kubeProxy: b.kubeProxy, before: before}
	sw.to("svcproxy", "svcproxy (clean start)")
	sw.to("upstream", "upstream over svcproxy's table")
	sw.to("svcproxy", "svcproxy over upstream's table (with svcproxy's leftovers)")
	sw.to("upstream", "upstream over the table svcproxy took over")
	sw.stop()
	for _, fam := range []string{"ip", "ip6"} {
		if out, err := c.Exec(n, "nft", "delete", "table", fam, "kube-proxy"); err != nil {
			t.Fatalf("nft delete table %s kube-proxy: %v: %s", fam, err, out)
		}
	}
	sw.to("upstream", "upstream (clean start)")
	sw.to("svcproxy", "svcproxy over upstream's table")
}

// switcher runs one proxy at a time on n.
type switcher struct {
	t         *testing.T
	c         *F.Cluster
	n         *F.Node
	kubeProxy string
	before    []rollbackService
	upstream  *F.Proc // the running upstream, or nil
	rounds    int
}

// to stops the proxy that runs and starts proxy ("svcproxy" or
// "upstream"), then checks it (expectSwitched).
func (s *switcher) to(proxy, what string) {
	s.t.Helper()
	s.stop()
	if proxy == "upstream" {
		s.upstream = startKubeProxy(s.t, s.c, s.n, s.kubeProxy)
	} else if err := s.c.StartProxy(s.n); err != nil {
		s.t.Fatal(err)
	}
	s.rounds++
	expectSwitched(s.t, s.c, s.n, what, s.upstream, s.before, strconv.Itoa(s.rounds))
}

// stop stops whichever proxy runs.
func (s *switcher) stop() {
	if s.upstream != nil {
		s.upstream.Stop(5 * time.Second)
		s.upstream = nil
	}
	if s.n.Proxy != nil {
		s.n.Proxy.Stop(5 * time.Second)
		// WaitHealthz would take the stopped svcproxy for this node's proxy.
		s.n.Proxy = nil
	}
}

// rollbackService is a Service and the pod that serves it.
type rollbackService struct {
	svc *corev1.Service
	pod string
	// target is what a client asks, from.
	target F.Target
	from   string
}

// createRollbackServices creates, before any proxy runs, one Service of
// each kind whose objects differ between the two layouts: a plain
// ClusterIP, ClientIP affinity (per-endpoint affinity sets) and a
// LoadBalancer with loadBalancerSourceRanges (the firewall objects).
func createRollbackServices(t *testing.T, c *F.Cluster, n *F.Node) []rollbackService {
	t.Helper()
	var out []rollbackService
	add := func(name string, mutate func(*corev1.Service)) *corev1.Service {
		svc := F.NewService(name, corev1.ServiceTypeClusterIP)
		mutate(svc)
		svc = c.CreateService(svc)
		pod := c.AddPod(n, "p"+name)
		c.SetEndpoints(svc, F.EP{Pod: pod})
		out = append(out, rollbackService{svc: svc, pod: pod.Name,
			target: F.TCP(svc.Spec.ClusterIP, 80), from: "cli1"})
		return svc
	}
	add("plain", func(*corev1.Service) {})
	add("sticky", func(s *corev1.Service) {
		s.Spec.SessionAffinity = corev1.ServiceAffinityClientIP
	})
	lb := add("guarded", func(s *corev1.Service) {
		s.Spec.Type = corev1.ServiceTypeLoadBalancer
		s.Spec.LoadBalancerSourceRanges = []string{F.ExtIP + "/32"}
	})
	lbIP := F.LBNet + ".7"
	c.SetLoadBalancerIP(lb, lbIP)
	out = append(out, rollbackService{svc: lb, pod: out[len(out)-1].pod, target: F.TCP(lbIP, 80), from: "ext"})
	return out
}

// expectSwitched checks the proxy that just started on n: its syncs
// succeed, the Services of before answer, a new Service answers within
// 2 s, and (upstream) only upstream's base chains are hooked. upstream is
// nil for svcproxy.
func expectSwitched(t *testing.T, c *F.Cluster, n *F.Node, what string, upstream *F.Proc, before []rollbackService, round string) {
	t.Helper()
	if err := waitSyncSucceeded(c, n, upstream); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	for _, s := range before {
		if err := c.Eventually(s.from, s.target, 5, 10*time.Second, F.OnlyBy(s.pod)); err != nil {
			t.Errorf("%s: Service %s, programmed before the switch: %v", what, s.svc.Name, err)
		}
	}
	expectNewServiceFast(t, c, n, what, "new-"+round)
	if upstream != nil {
		expectOnlyUpstreamBaseChains(t, c, n, what)
	}
	if err := syncFailures(c, n, upstream); err != nil {
		t.Errorf("%s: %v", what, err)
	}
}

// expectNewServiceFast creates a Service with one endpoint and expects it
// to answer within 2 s of its EndpointSlice's creation.
func expectNewServiceFast(t *testing.T, c *F.Cluster, n *F.Node, what, name string) {
	t.Helper()
	pod := c.AddPod(n, "p"+name)
	svc := c.CreateService(F.NewService(name, corev1.ServiceTypeClusterIP))
	t0 := time.Now()
	c.SetEndpoints(svc, F.EP{Pod: pod})
	target := F.TCP(svc.Spec.ClusterIP, 80)
	err := c.EventuallyWithin("cli1", target, 1, 300*time.Millisecond, 2*time.Second, F.OnlyBy(pod.Name))
	if err != nil {
		t.Errorf("%s: a Service created after the switch: %v", what, err)
		return
	}
	t.Logf("%s: Service %s answered %v after its EndpointSlice", what, name, time.Since(t0).Round(time.Millisecond))
}

// waitSyncSucceeded waits until the proxy on n reports a successful sync
// of both families (kubeproxy_sync_proxy_rules_last_timestamp_seconds is
// set only by a sync that succeeded) and fails at the first sync failure.
func waitSyncSucceeded(c *F.Cluster, n *F.Node, upstream *F.Proc) error {
	deadline := time.Now().Add(60 * time.Second)
	for {
		if err := syncFailures(c, n, upstream); err != nil {
			return err
		}
		text, err := c.Metrics(n)
		if err == nil && metricValue(text, `kubeproxy_sync_proxy_rules_last_timestamp_seconds{ip_family="IPv4"}`) > 0 &&
			metricValue(text, `kubeproxy_sync_proxy_rules_last_timestamp_seconds{ip_family="IPv6"}`) > 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("no successful sync of both families after 60 s (%v)", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// syncFailures reports the proxy's failed nftables syncs: its failure
// counter and, for upstream, the "sync failed" lines of its log.
func syncFailures(c *F.Cluster, n *F.Node, upstream *F.Proc) error {
	text, err := c.Metrics(n)
	if err != nil {
		return nil // not serving yet
	}
	failed := 0.0
	for _, fam := range []string{"IPv4", "IPv6"} {
		failed += metricValue(text, `kubeproxy_sync_proxy_rules_nftables_sync_failures_total{ip_family="`+fam+`"}`)
	}
	if failed == 0 {
		return nil
	}
	log := ""
	if upstream != nil {
		log = "\n" + failureLines(c, n)
	}
	return fmt.Errorf("%v failed nftables syncs%s", failed, log)
}

// failureLines are the lines of upstream's log on n that say a sync failed.
func failureLines(c *F.Cluster, n *F.Node) string {
	data, err := os.ReadFile(filepath.Join(c.Work, "logs", "kube-proxy-"+n.Name+".log"))
	if err != nil {
		return err.Error()
	}
	// klog writes a multi-line error as err=< … > on the lines after.
	var lines []string
	inErr := false
	for _, l := range strings.Split(string(data), "\n") {
		switch {
		case len(lines) >= 12:
		case inErr:
			lines = append(lines, trimmed(l))
			inErr = !strings.HasPrefix(strings.TrimSpace(l), ">")
		case strings.Contains(strings.ToLower(l), "sync failed"):
			lines = append(lines, trimmed(l))
			inErr = strings.HasSuffix(l, "err=<")
		}
	}
	return strings.Join(lines, "\n")
}

// metricValue is the value of one sample (name with its labels), 0 when
// absent.
func metricValue(text, sample string) float64 {
	m := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(sample) + ` (\S+)$`).FindStringSubmatch(text)
	if m == nil {
		return 0
	}
	v, _ := strconv.ParseFloat(m[1], 64)
	return v
}

// upstreamBaseChains are upstream's base chains (v1.35 to v1.37: same names,
// hooks and priorities): type, hook, priority.
var upstreamBaseChains = map[string]string{
	"filter-prerouting-pre-dnat": "filter prerouting -110",
	"filter-output-pre-dnat":     "filter output -110",
	"filter-input":               "filter input 0",
	"filter-forward":             "filter forward 0",
	"filter-output":              "filter output 0",
	"nat-prerouting":             "nat prerouting -100",
	"nat-output":                 "nat output -100",
	"nat-postrouting":            "nat postrouting 100",
}

// expectOnlyUpstreamBaseChains fails for any base chain of the kube-proxy
// tables on n that is not one of upstream's, as upstream defines it.
func expectOnlyUpstreamBaseChains(t *testing.T, c *F.Cluster, n *F.Node, what string) {
	t.Helper()
	out, err := c.Exec(n, "nft", "-j", "list", "chains")
	if err != nil {
		t.Fatalf("nft list chains: %v: %s", err, out)
	}
	var listing struct {
		Nftables []struct {
			Chain *struct {
				Family, Table, Name, Type, Hook string
				Prio                            int
			}
		}
	}
	if err := json.Unmarshal([]byte(out), &listing); err != nil {
		t.Fatalf("nft -j list chains: %v", err)
	}
	hooked := 0
	for _, o := range listing.Nftables {
		ch := o.Chain
		if ch == nil || ch.Table != "kube-proxy" || ch.Hook == "" {
			continue
		}
		hooked++
		got := fmt.Sprintf("%s %s %d", ch.Type, ch.Hook, ch.Prio)
		if want, ok := upstreamBaseChains[ch.Name]; !ok || got != want {
			t.Errorf("%s: %s kube-proxy: base chain %s (%s) is not upstream's (want %q): left hooked after the switch",
				what, ch.Family, ch.Name, got, want)
		}
	}
	if want := 2 * len(upstreamBaseChains); hooked != want {
		t.Errorf("%s: %d base chains in the kube-proxy tables, want upstream's %d", what, hooked, want)
	}
}
