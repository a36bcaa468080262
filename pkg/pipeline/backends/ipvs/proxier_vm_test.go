//go:build ipvsvm

package ipvs_test

import (
	"context"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/svcproxy/svcproxy/pkg/kipset"
	"github.com/svcproxy/svcproxy/pkg/kipvs"
	"github.com/svcproxy/svcproxy/pkg/klink"
	"github.com/svcproxy/svcproxy/pkg/pipeline/backends/ipvs"
	"github.com/svcproxy/svcproxy/pkg/pipeline/model"
	"github.com/svcproxy/svcproxy/pkg/proxy"
	"github.com/svcproxy/svcproxy/pkg/testing/netnstest"
	"github.com/svcproxy/svcproxy/pkg/testing/netnstest/scenario"
)

// The VM topology (netnstest's addressing plan):
//
//	client ── fabric bridge ──┬── node1 (runs the Proxier) ── pod-a, pod-b, pod-c
//	                          └── node2 ── pod-r
//
// Every pod runs TCP, UDP and SCTP echo servers on 8080 that answer with
// their name and the source address they saw.
type vmEnv struct {
	node1, node2 *netnstest.Node
	pods         map[string]*netnstest.Pod
	client       *netnstest.NS
	clientIPs    [2]netip.Addr
}

const (
	podPort = 8080
	svcPort = 80
	testNS  = "vm"
)

func newVMEnv(t *testing.T) *vmEnv {
	t.Helper()
	lab := netnstest.New(t)
	cluster, err := netnstest.NewCluster(lab, 2)
	if err != nil {
		t.Fatal(err)
	}
	e := &vmEnv{node1: cluster.Nodes[0], node2: cluster.Nodes[1], pods: map[string]*netnstest.Pod{}}
	for _, p := range []struct {
		name string
		node *netnstest.Node
	}{{"pod-a", e.node1}, {"pod-b", e.node1}, {"pod-c", e.node1}, {"pod-r", e.node2}} {
		pod, err := p.node.AddPod(p.name)
		if err != nil {
			t.Fatal(err)
		}
		for _, proto := range []proxy.Protocol{proxy.TCP, proxy.UDP, proxy.SCTP} {
			if _, err := pod.NS.Serve(p.name, proto, podPort); err != nil {
				t.Fatal(err)
			}
		}
		e.pods[p.name] = pod
	}
	var ids [][2]netip.Addr
	if e.client, ids, err = cluster.AddClient("client", e.node1, 1); err != nil {
		t.Fatal(err)
	}
	e.clientIPs = ids[0]
	return e
}

// TestVMProxier programs both scenario.Families into node1 and checks the kernel
// objects and real traffic through them.
func TestVMProxier(t *testing.T) {
	e := newVMEnv(t)
	for _, f := range scenario.Families {
		t.Run(string(f.Family), func(t *testing.T) {
			w := &world{e: e, f: f, tracker: model.NewTracker(f.Family)}
			p, _ := e.newProxier(t, f, ipvs.Options{})
			e.sync(t, p, w.apply(vmServices()...))
			t.Run("ReadBack", func(t *testing.T) { e.readBack(t, f) })
			t.Run("ClusterIPBalances", func(t *testing.T) { e.balances(t, f, f.ClusterIP(10)) })
			t.Run("NodePort", func(t *testing.T) { e.nodePort(t, f) })
			t.Run("ExternalIPAndLBIP", func(t *testing.T) {
				e.balances(t, f, f.ExternalIP(10))
				e.balances(t, f, f.LBIP(10))
			})
			t.Run("Affinity", func(t *testing.T) { e.affinity(t, f) })
			t.Run("EndpointRemoval", func(t *testing.T) { e.endpointRemoval(t, f, p, w) })
			t.Run("Restart", func(t *testing.T) { e.restart(t, f, w) })
			t.Run("Cleanup", func(t *testing.T) { e.cleanup(t, f, p) })
		})
	}
}

func (e *vmEnv) ipvsClient(t *testing.T) *kipvs.Client {
	t.Helper()
	c, err := kipvs.New(e.node1.NS.Path())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

func (e *vmEnv) podAddrs(f scenario.Fam, names ...string) []netip.AddrPort {
	var out []netip.AddrPort
	for _, n := range names {
		out = append(out, netip.AddrPortFrom(e.pods[n].IP(f.V6), podPort))
	}
	slices.SortFunc(out, netip.AddrPort.Compare)
	return out
}

// dests lists the real servers of one virtual server with their weights.
func dests(t *testing.T, c *kipvs.Client, k kipvs.ServiceKey) map[netip.AddrPort]int {
	t.Helper()
	ds, err := c.ListDestinations(k)
	if err != nil {
		t.Fatalf("destinations of %s: %v", k, err)
	}
	out := map[netip.AddrPort]int{}
	for _, d := range ds {
		out[d.Addr] = d.Weight
	}
	return out
}

func (e *vmEnv) readBack(t *testing.T, f scenario.Fam) {
	c := e.ipvsClient(t)
	svcs, err := c.ListServices()
	if err != nil {
		t.Fatal(err)
	}
	byKey := map[kipvs.ServiceKey]kipvs.Service{}
	for _, s := range svcs {
		if s.Addr.Is6() == f.V6 {
			byKey[s.ServiceKey] = s
		}
	}
	want := map[kipvs.ServiceKey][]string{}
	for _, s := range vmServices() {
		for _, proto := range protocols {
			want[kipvs.ServiceKey{Addr: f.ClusterIP(s.ip), Protocol: ipvs.ProtocolOf(proto), Port: svcPort}] = s.endpoints
			if s.external {
				want[kipvs.ServiceKey{Addr: f.ExternalIP(s.ip), Protocol: ipvs.ProtocolOf(proto), Port: svcPort}] = s.endpoints
			}
			if s.lb {
				want[kipvs.ServiceKey{Addr: f.LBIP(s.ip), Protocol: ipvs.ProtocolOf(proto), Port: svcPort}] = s.endpoints
			}
		}
	}
	for i, proto := range protocols {
		want[kipvs.ServiceKey{Addr: e.node1.IP(f.V6), Protocol: ipvs.ProtocolOf(proto), Port: uint16(30010 + i)}] = allPods
	}
	for k, eps := range want {
		s, ok := byKey[k]
		if !ok {
			t.Errorf("no virtual server %s", k)
			continue
		}
		if s.Scheduler != kipvs.RoundRobin {
			t.Errorf("%s scheduler %q, want rr", k, s.Scheduler)
		}
		sticky := k.Addr == f.ClusterIP(12)
		if persistent := s.Flags&kipvs.FlagPersistent != 0; persistent != sticky || (sticky && s.Timeout != 10800) {
			t.Errorf("%s flags %#x timeout %d, want persistent=%v (10800 s)", k, s.Flags, s.Timeout, sticky)
		}
		got := dests(t, c, k)
		var addrs []netip.AddrPort
		for a, w := range got {
			addrs = append(addrs, a)
			if w != 1 {
				t.Errorf("%s → %s weight %d, want 1", k, a, w)
			}
		}
		slices.SortFunc(addrs, netip.AddrPort.Compare)
		if wantAddrs := e.podAddrs(f, eps...); !slices.Equal(addrs, wantAddrs) {
			t.Errorf("%s real servers %v, want %v", k, addrs, wantAddrs)
		}
	}
	// kube-ipvs0 holds every cluster, external and LB IP of the family.
	lk, err := klink.New(e.node1.NS.Path())
	if err != nil {
		t.Fatal(err)
	}
	defer lk.Close()
	onLink, err := lk.ListAddrs(ipvs.DummyLink)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range vmServices() {
		for _, a := range []netip.Addr{f.ClusterIP(s.ip), f.ExternalIP(s.ip), f.LBIP(s.ip)} {
			isFrontend := a == f.ClusterIP(s.ip) || (s.external && a == f.ExternalIP(s.ip)) || (s.lb && a == f.LBIP(s.ip))
			if slices.Contains(onLink, a) != isFrontend {
				t.Errorf("%s on %s: %v, want %v", a, ipvs.DummyLink, !isFrontend, isFrontend)
			}
		}
	}
	// ipsets: cluster IPs for masquerade, node ports per protocol.
	is, err := kipset.New(e.node1.NS.Path())
	if err != nil {
		t.Fatal(err)
	}
	defer is.Close()
	prefix := "KUBE-"
	if f.V6 {
		prefix = "KUBE-6-"
	}
	entries, err := is.ListEntries(prefix + "CLUSTER-IP")
	if err != nil {
		t.Fatal(err)
	}
	if wantE := (kipset.Entry{IP: f.ClusterIP(10), Protocol: kipset.TCP, Port: svcPort}); !slices.Contains(entries, wantE) {
		t.Errorf("%sCLUSTER-IP lacks %s: %v", prefix, wantE, entries)
	}
	entries, err = is.ListEntries(prefix + "NODE-PORT-TCP")
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(entries, kipset.Entry{Port: 30010}) {
		t.Errorf("%sNODE-PORT-TCP lacks 30010: %v", prefix, entries)
	}
}

func (e *vmEnv) fromClient(f scenario.Fam) netnstest.Client {
	return netnstest.Client{NS: e.client, Source: f.Pick(e.clientIPs)}
}

// balances: rr over 4 endpoints, 8 requests reach each exactly twice.
func (e *vmEnv) balances(t *testing.T, f scenario.Fam, vip netip.Addr) {
	for _, proto := range protocols {
		got := scenario.AskMany(t, e.fromClient(f), proto, netip.AddrPortFrom(vip, svcPort), 8)
		if !slices.Equal(scenario.Servers(got), allPods) {
			t.Errorf("%s to %s reached %v, want all of %v", proto, vip, got, allPods)
		}
	}
}

func (e *vmEnv) nodePort(t *testing.T, f scenario.Fam) {
	for i, proto := range protocols {
		dst := netip.AddrPortFrom(e.node1.IP(f.V6), uint16(30010+i))
		got := scenario.AskMany(t, e.fromClient(f), proto, dst, 8)
		if !slices.Equal(scenario.Servers(got), allPods) {
			t.Errorf("%s to node port %s reached %v, want all of %v", proto, dst, got, allPods)
		}
	}
}

func (e *vmEnv) affinity(t *testing.T, f scenario.Fam) {
	dst := netip.AddrPortFrom(f.ClusterIP(12), svcPort)
	for _, proto := range []proxy.Protocol{proxy.TCP, proxy.UDP} {
		if got := scenario.AskMany(t, e.fromClient(f), proto, dst, 10); len(got) != 1 {
			t.Errorf("%s with ClientIP affinity: 10 connections reached %v, want one endpoint", proto, got)
		}
	}
}

// endpointRemoval: pod-b leaves "churn" while a connection to it is open.
// Its real server stays at weight 0 (graceful termination), new
// connections avoid it, the open one keeps working, and Reap deletes it
// once the connection is gone.
func (e *vmEnv) endpointRemoval(t *testing.T, f scenario.Fam, p *ipvs.Proxier, w *world) {
	dst := netip.AddrPortFrom(f.ClusterIP(22), svcPort)
	var open *netnstest.Conn
	for i := 0; i < 6 && open == nil; i++ {
		conn, err := e.fromClient(f).DialTCP(dst)
		if err != nil {
			t.Fatal(err)
		}
		ans, err := conn.Ask()
		if err != nil {
			t.Fatal(err)
		}
		if ans.Server == "pod-b" {
			open = conn
		} else {
			conn.Close()
		}
	}
	if open == nil {
		t.Fatal("no connection reached pod-b in 6 tries")
	}
	defer open.Close()

	churn := vmServices()[2]
	churn.endpoints = []string{"pod-a", "pod-c"}
	e.sync(t, p, w.apply(churn))

	c := e.ipvsClient(t)
	key := kipvs.ServiceKey{Addr: f.ClusterIP(22), Protocol: kipvs.TCP, Port: svcPort}
	podB := netip.AddrPortFrom(e.pods["pod-b"].IP(f.V6), podPort)
	if wgt, ok := dests(t, c, key)[podB]; !ok || wgt != 0 {
		t.Errorf("removed endpoint with an open connection: listed=%v weight=%d, want listed at weight 0", ok, wgt)
	}
	if got := scenario.AskMany(t, e.fromClient(f), proxy.TCP, dst, 8); got["pod-b"] != 0 {
		t.Errorf("new connections after removal reached %v; want none on pod-b", got)
	}
	if ans, err := open.Ask(); err != nil || ans.Server != "pod-b" {
		t.Errorf("open connection to pod-b after removal: %v, %v", ans, err)
	}
	if err := p.Reap(); err != nil {
		t.Fatal(err)
	}
	if _, ok := dests(t, c, key)[podB]; !ok {
		t.Error("Reap deleted a real server that still has an active connection")
	}
	open.Close()
	// The kernel counts the connection as active until the FIN handshake
	// is done; give it a moment.
	deadline := time.Now().Add(10 * time.Second)
	for {
		if err := p.Reap(); err != nil {
			t.Fatal(err)
		}
		if _, ok := dests(t, c, key)[podB]; !ok {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("Reap never deleted the drained real server")
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// restart: a new Proxier over the same kernel state adopts it: the same
// State costs no IPVS, ipset or address write, the iptables rules stay as
// they were, and an open connection survives.
func (e *vmEnv) restart(t *testing.T, f scenario.Fam, w *world) {
	dst := netip.AddrPortFrom(f.ClusterIP(10), svcPort)
	conn, err := e.fromClient(f).DialTCP(dst)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	before := e.iptablesSave(t, f)
	p2, cnt := e.newProxier(t, f, ipvs.Options{})
	e.syncIn(t, p2, w.state, proxy.RecoverySync) // a new Proxier, as the syncer's first sync
	t.Logf("restart: %d write attempts, %d of them changed the kernel", cnt.attempts.Load(), cnt.writes.Load())
	if n := cnt.writes.Load(); n != 0 {
		t.Errorf("restart with an unchanged State made %d IPVS/ipset/link writes, want 0", n)
	}
	// Adoption lists before it writes: even a refused create (a set that
	// exists) means the restart did not recognise what it found.
	if n := cnt.attempts.Load(); n != 0 {
		t.Errorf("restart with an unchanged State attempted %d IPVS/ipset/link writes, want 0", n)
	}
	if after := e.iptablesSave(t, f); after != before {
		t.Errorf("iptables rules changed on restart:\nbefore:\n%s\nafter:\n%s", before, after)
	}
	if _, err := conn.Ask(); err != nil {
		t.Errorf("connection opened before the restart: %v", err)
	}
}

func (e *vmEnv) iptablesSave(t *testing.T, f scenario.Fam) string {
	t.Helper()
	cmd := "iptables-save"
	if f.V6 {
		cmd = "ip6tables-save"
	}
	out, err := e.node1.NS.Run(context.Background(), cmd)
	if err != nil {
		t.Fatal(err)
	}
	var keep []string
	for _, l := range strings.Split(string(out), "\n") {
		if !strings.HasPrefix(l, "#") { // timestamps
			keep = append(keep, l)
		}
	}
	return strings.Join(keep, "\n")
}

func (e *vmEnv) cleanup(t *testing.T, f scenario.Fam, p *ipvs.Proxier) {
	if err := e.node1.NS.Do(func() error { return p.Cleanup(context.Background()) }); err != nil {
		t.Fatalf("Cleanup: %v", err)
	}
	c := e.ipvsClient(t)
	svcs, err := c.ListServices()
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range svcs {
		if s.Addr.Is6() == f.V6 {
			t.Errorf("virtual server left after Cleanup: %s", s.ServiceKey)
		}
	}
	out, err := e.node1.NS.Run(context.Background(), "ipset", "list", "-n")
	if err != nil {
		t.Fatal(err)
	}
	prefix := "KUBE-"
	if f.V6 {
		prefix = "KUBE-6-"
	}
	for _, n := range strings.Fields(string(out)) {
		if strings.HasPrefix(n, prefix) && (f.V6 || !strings.HasPrefix(n, "KUBE-6-")) {
			t.Errorf("ipset left after Cleanup: %s", n)
		}
	}
	if rules := e.iptablesSave(t, f); strings.Contains(rules, "KUBE-") {
		t.Errorf("KUBE- iptables objects left after Cleanup:\n%s", rules)
	}
	// kube-ipvs0 goes with the last family: after IPv6, nothing is left.
	if f.V6 {
		if out, err := e.node1.NS.Run(context.Background(), "ip", "link", "show", ipvs.DummyLink); err == nil {
			t.Errorf("%s left after Cleanup of both scenario.Families: %s", ipvs.DummyLink, out)
		}
	}
}

// TestVMSchedulers: every scheduler the kernel ships, decided by desired as
// the default (--ipvs-scheduler), is created and read back, and traffic
// flows through it. Each round is a new Proxier (a restart with another
// --ipvs-scheduler) whose State holds only that round's Service: it adopts
// the previous round's objects, deletes that virtual server and creates
// its own.
func TestVMSchedulers(t *testing.T) {
	e := newVMEnv(t)
	f := scenario.Families[0]
	for i, sched := range kipvs.Schedulers {
		t.Run(sched, func(t *testing.T) {
			spec := svcSpec{name: "sched-" + sched, ip: 30 + i, endpoints: []string{"pod-a", "pod-b"}}
			w := &world{e: e, f: f, tracker: model.NewTracker(f.Family),
				scheduling: ipvs.NewScheduling(sched)}
			p, _ := e.newProxier(t, f, ipvs.Options{})
			e.sync(t, p, w.apply(spec))
			c := e.ipvsClient(t)
			svcs, err := c.ListServices()
			if err != nil {
				t.Fatal(err)
			}
			key := kipvs.ServiceKey{Addr: f.ClusterIP(30 + i), Protocol: kipvs.TCP, Port: svcPort}
			var found bool
			for _, s := range svcs {
				switch {
				case s.ServiceKey == key:
					found = true
					if s.Scheduler != sched {
						t.Errorf("%s: scheduler %q", key, s.Scheduler)
					}
				case s.Addr.Is4() && s.Addr != key.Addr:
					t.Errorf("virtual server of an earlier round left: %s", s.ServiceKey)
				}
			}
			if !found {
				t.Fatalf("no virtual server %s", key)
			}
			got := scenario.AskMany(t, e.fromClient(f), proxy.TCP, netip.AddrPortFrom(f.ClusterIP(30+i), svcPort), 4)
			for s := range got {
				if s != "pod-a" && s != "pod-b" {
					t.Errorf("reached %s", s)
				}
			}
		})
	}
	// A fresh Proxier cleans up what the others left (what --cleanup does).
	p, _ := e.newProxier(t, f, ipvs.Options{})
	if err := e.node1.NS.Do(func() error { return p.Cleanup(context.Background()) }); err != nil {
		t.Errorf("Cleanup: %v", err)
	}
	if svcs, err := e.ipvsClient(t).ListServices(); err != nil || len(svcs) != 0 {
		t.Errorf("after Cleanup: %v, %v; want no virtual server", svcs, err)
	}
}
