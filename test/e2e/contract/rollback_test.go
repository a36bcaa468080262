package contract

import (
	"fmt"
	"net"
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
// kube-proxy in nftables mode, for each upstream minor it runs (see
// testRollback).
func TestNFTablesRollback(t *testing.T) { testRollback(t, nftablesRollback) }

// TestIPTablesRollback is TestNFTablesRollback in iptables mode.
func TestIPTablesRollback(t *testing.T) { testRollback(t, iptablesRollback) }

// testRollback switches one node between svcproxy and upstream kube-proxy
// (each minor of upstreamMinors, a subtest each) in mode m, over the
// same API state and the same configuration file, without deleting the
// rules in between (what a `kubectl rollout undo` of the DaemonSet does):
// svcproxy from a clean start, then upstream (the rollback), then svcproxy
// over what upstream left, then upstream again; last, from a clean start
// again (the load's control: it must see the outage), upstream and then
// svcproxy taking its rules over. A switch is what
// a DaemonSet rollout does: the old process gets SIGTERM and exits, then the
// new one starts; the kernel's rules stay in place between them.
//
// After each switch the new proxy's syncs must succeed, the Services
// programmed before must still answer, a Service created after the switch
// must answer soon (newServiceLimit), and after a switch to upstream nothing may be
// left that upstream does not own (m.onlyUpstream). Across every switch a
// load generator opens new TCP connections to the Services programmed
// before, and not one may fail.
func testRollback(t *testing.T, m rollbackMode) {
	for _, minor := range upstreamMinors(t) {
		t.Run("v"+minor, func(t *testing.T) { rollbackSequence(t, m, upstreamFor(t, minor)) })
	}
}

// rollbackSequence runs the switches of testRollback against upstream up.
func rollbackSequence(t *testing.T, m rollbackMode, up upstreamKubeProxy) {
	c := F.New(t, F.Options{Mode: m.name, Nodes: 1, NoProxy: true, SyncPeriod: 5 * time.Second})
	n := c.Nodes[0]
	sw := &switcher{t: t, c: c, n: n, mode: m, up: up, before: createRollbackServices(t, c, n)}
	sw.to("svcproxy", "svcproxy (clean start)")
	sw.load = startSwitchLoad(t, c, n, sw.before)
	sw.to("upstream", up.version+" over svcproxy's rules")
	sw.to("svcproxy", "svcproxy over "+up.version+"'s rules (with svcproxy's leftovers)")
	sw.to("upstream", up.version+" over the rules svcproxy took over")
	sw.cleanStart(up.version + " (clean start)")
	sw.to("svcproxy", "svcproxy over "+up.version+"'s rules")
	sw.load.stop(t)
}

// outageHold is how long cleanStart leaves a node without rules: longer
// than the load's request timeout, so that every stream has at least one
// request begin and end inside the outage.
const outageHold = 2 * time.Second

// switcher runs one proxy at a time on n.
type switcher struct {
	t        *testing.T
	c        *F.Cluster
	n        *F.Node
	mode     rollbackMode
	up       upstreamKubeProxy
	before   []rollbackService
	upstream *F.Proc // the running upstream, or nil
	load     *switchLoad
	rounds   int
}

// to stops the proxy that runs and starts proxy ("svcproxy" or
// "upstream"), then checks it (expectSwitched) and that no connection the
// load opened since the last switch failed.
func (s *switcher) to(proxy, what string) {
	s.t.Helper()
	if s.load != nil {
		s.load.mark()
	}
	s.stop()
	s.start(proxy, what)
	if s.load != nil {
		s.load.expectNoFailure(s.t, what)
	}
}

// cleanStart stops the proxy that runs, removes every rule of the mode and
// starts upstream. That is no switch: the Services are down until
// upstream's first sync, and the load must have seen it, or it would not
// see a failed switch either. The rules stay gone for outageHold before
// upstream starts: upstream may program them again within a second, and
// on a loaded machine one request of a stream, begun before they went and
// slowed past their return, can span such an outage: that stream sees none
// of it.
func (s *switcher) cleanStart(what string) {
	s.t.Helper()
	s.load.mark()
	s.stop()
	s.mode.wipe(s.t, s.c, s.n, s.up)
	time.Sleep(outageHold)
	s.start("upstream", what)
	s.forgetOutageFlows()
	// Connections begun before the deletion are the outage's too: let them
	// end (the load's timeout is 1 s) before counting it.
	time.Sleep(1500 * time.Millisecond)
	s.load.expectOutage(s.t, what)
}

// forgetOutageFlows deletes the conntrack entries the outage left: a SYN
// sent while no rule translated it made an entry that was never DNATed,
// and it outlives the outage by the SYN_SENT timeout (two minutes). A
// client that reuses that source port before then — and the load cycles
// through its ports faster — sends a SYN the kernel matches to the old
// entry and does not translate: that connection fails under any proxy,
// and would be blamed on the next switch. Only entries whose reply comes
// from the frontend itself are deleted: those no rule made.
func (s *switcher) forgetOutageFlows() {
	s.t.Helper()
	for _, b := range s.before {
		addr := b.target.Addr
		host, port, err := net.SplitHostPort(addr)
		if err != nil {
			s.t.Fatalf("target %s: %v", addr, err)
		}
		fam := "ipv4"
		if strings.Contains(host, ":") {
			fam = "ipv6"
		}
		out, err := s.c.Exec(s.n, "conntrack", "-D", "-f", fam, "-p", "tcp",
			"-d", host, "--reply-src", host, "--dport", port)
		if err != nil && !strings.Contains(err.Error(), " 0 flow entries") {
			s.t.Fatalf("deleting the outage's conntrack entries to %s: %v: %s", addr, err, out)
		}
	}
}

// start starts proxy and checks it.
func (s *switcher) start(proxy, what string) {
	s.t.Helper()
	if proxy == "upstream" {
		s.upstream = startKubeProxy(s.t, s.c, s.n, s.up.bin)
	} else if err := s.c.StartProxy(s.n); err != nil {
		s.t.Fatal(err)
	}
	s.rounds++
	s.expectSwitched(what, strconv.Itoa(s.rounds))
}

// stop stops whichever proxy runs, with SIGTERM as the kubelet does, and
// waits for it to exit.
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
// each kind whose objects differ between the layouts: a plain ClusterIP,
// ClientIP affinity (per-endpoint affinity sets), a LoadBalancer with
// loadBalancerSourceRanges (the firewall objects), also asked at its LB IP,
// and a dual-stack NodePort, asked at both cluster IPs and from outside at
// both of the node's addresses (the ip6 table or ip6tables as well).
func createRollbackServices(t *testing.T, c *F.Cluster, n *F.Node) []rollbackService {
	t.Helper()
	var out []rollbackService
	add := func(name string, mutate func(*corev1.Service)) (*corev1.Service, *F.Pod) {
		svc := F.NewService(name, corev1.ServiceTypeClusterIP)
		mutate(svc)
		svc = c.CreateService(svc)
		pod := c.AddPod(n, "p"+name)
		c.SetEndpoints(svc, F.EP{Pod: pod})
		out = append(out, rollbackService{svc: svc, pod: pod.Name,
			target: F.TCP(svc.Spec.ClusterIP, 80), from: "cli1"})
		return svc, pod
	}
	add("plain", func(*corev1.Service) {})
	add("sticky", func(s *corev1.Service) {
		s.Spec.SessionAffinity = corev1.ServiceAffinityClientIP
	})
	lb, lbPod := add("guarded", func(s *corev1.Service) {
		s.Spec.Type = corev1.ServiceTypeLoadBalancer
		s.Spec.LoadBalancerSourceRanges = []string{F.ExtIP + "/32"}
	})
	lbIP := F.LBNet + ".7"
	c.SetLoadBalancerIP(lb, lbIP)
	out = append(out, rollbackService{svc: lb, pod: lbPod.Name, target: F.TCP(lbIP, 80), from: "ext"})
	np, pod := add("nodeport", func(s *corev1.Service) {
		s.Spec.Type = corev1.ServiceTypeNodePort
		dual := corev1.IPFamilyPolicyRequireDualStack
		s.Spec.IPFamilyPolicy = &dual
		s.Spec.IPFamilies = []corev1.IPFamily{corev1.IPv4Protocol, corev1.IPv6Protocol}
	})
	c.SetEndpoints6(np, F.EP{Pod: pod})
	port := np.Spec.Ports[0].NodePort
	return append(out,
		rollbackService{svc: np, pod: pod.Name, target: F.TCP(np.Spec.ClusterIPs[1], 80), from: "cli1"},
		rollbackService{svc: np, pod: pod.Name, target: F.TCP(n.IP, port), from: "ext"},
		rollbackService{svc: np, pod: pod.Name, target: F.TCP(n.IP6, port), from: "ext"})
}

// expectSwitched checks the proxy that just started on s.n: its syncs
// succeed, the Services of s.before answer, a new Service answers soon
// (newServiceLimit), and (upstream) nothing but upstream's is left.
func (s *switcher) expectSwitched(what, round string) {
	t, c, n := s.t, s.c, s.n
	t.Helper()
	if err := s.waitSyncSucceeded(); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	for _, b := range s.before {
		if err := c.Eventually(b.from, b.target, 3, 10*time.Second, F.OnlyBy(b.pod)); err != nil {
			t.Errorf("%s: Service %s (%s), programmed before the switch: %v", what, b.svc.Name, b.target, err)
		}
	}
	expectNewServiceFast(t, c, n, what, "new-"+round, newServiceLimit(s.upstream != nil))
	if s.upstream != nil {
		s.mode.onlyUpstream(t, c, n, what)
	}
	if err := s.syncFailures(); err != nil {
		t.Errorf("%s: %v", what, err)
	}
}

// newServiceLimit is how soon a Service created after a switch must
// answer. svcproxy's is its own latency under test. Upstream's check is
// that it programs new Services at all — a rollback that leaves it failing
// every sync freezes the node — and its latency is its own: its minimum
// sync period (1 s in these tests) plus a restore that takes another second
// or two on a loaded machine.
func newServiceLimit(upstream bool) time.Duration {
	if upstream {
		return 5 * time.Second
	}
	return 2 * time.Second
}

// expectNewServiceFast creates a Service with one endpoint and expects it
// to answer within limit of its EndpointSlice's creation.
func expectNewServiceFast(t *testing.T, c *F.Cluster, n *F.Node, what, name string, limit time.Duration) {
	t.Helper()
	took, err := c.NewServiceAnswers(n, name, limit)
	if err != nil {
		t.Errorf("%s: a Service created after the switch: %v", what, err)
		return
	}
	t.Logf("%s: Service %s answered %v after its EndpointSlice", what, name, took.Round(time.Millisecond))
}

// waitSyncSucceeded waits until the proxy on s.n reports a successful sync
// of both families (kubeproxy_sync_proxy_rules_last_timestamp_seconds is
// set only by a sync that succeeded) and fails at the first sync failure.
func (s *switcher) waitSyncSucceeded() error {
	deadline := time.Now().Add(60 * time.Second)
	for {
		if err := s.syncFailures(); err != nil {
			return err
		}
		text, err := s.c.Metrics(s.n)
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

// syncFailures reports the proxy's failed syncs: its failure counter
// (s.mode.failures), for svcproxy its failed cleanups
// (s.mode.cleanupFailures) and, for upstream, the lines of its log that
// say a sync failed (s.mode.failed).
func (s *switcher) syncFailures() error {
	text, err := s.c.Metrics(s.n)
	if err != nil {
		return nil // not serving yet
	}
	series := []string{s.mode.failures}
	if s.upstream == nil && s.mode.cleanupFailures != "" {
		series = append(series, s.mode.cleanupFailures)
	}
	failed := 0.0
	for _, m := range series {
		for _, fam := range []string{"IPv4", "IPv6"} {
			failed += metricValue(text, m+`{ip_family="`+fam+`"}`)
		}
	}
	log := ""
	if s.upstream != nil {
		log = failureLines(s.c, s.n, s.mode.failed)
	}
	if failed == 0 && log == "" {
		return nil
	}
	return fmt.Errorf("%v failed syncs or cleanups (%s)\n%s", failed, strings.Join(series, ", "), log)
}

// failureLines are the lines of upstream's log on n that match failed, a
// failed sync.
func failureLines(c *F.Cluster, n *F.Node, failed *regexp.Regexp) string {
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
		case failed.MatchString(l):
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
