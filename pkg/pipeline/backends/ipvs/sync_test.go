package ipvs

import (
	"context"
	"errors"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/svcproxy/svcproxy/pkg/kipset"
	"github.com/svcproxy/svcproxy/pkg/kipvs"
	"github.com/svcproxy/svcproxy/pkg/pipeline/desired"
	"github.com/svcproxy/svcproxy/pkg/proxy"
	"github.com/svcproxy/svcproxy/pkg/testing/proxytest"
)

func ep(ip netip.Addr) netip.AddrPort { return netip.AddrPortFrom(ip, 8080) }

func TestCreateUpdateDeleteVirtualServers(t *testing.T) {
	f := newFakes()
	p := newProxier(f, proxy.IPv4, Options{})
	a := svcPort("a", 1, w4.LocalPod(1), w4.RemotePod(1))
	st := baseState(proxy.IPv4, a)
	mustSync(t, p, st)

	k := vsKey(a.ClusterIP, 80)
	svc, _, ok := f.ipvs.Service(k)
	if !ok || svc.Scheduler != kipvs.RoundRobin || svc.Flags != 0 {
		t.Fatalf("cluster IP VS = %+v, %v; want rr without flags", svc, ok)
	}
	if got := dests(t, f, k); len(got) != 2 || got[ep(w4.LocalPod(1))] != 1 || got[ep(w4.RemotePod(1))] != 1 {
		t.Errorf("real servers %v", got)
	}
	if addrs, _ := f.link.ListAddrs(DummyLink); len(addrs) != 1 || addrs[0] != a.ClusterIP {
		t.Errorf("%s addresses %v, want the cluster IP", DummyLink, addrs)
	}
	if !f.ipset.Has(setClusterIP, kipset.Entry{IP: a.ClusterIP, Protocol: kipset.TCP, Port: 80}) {
		t.Error("cluster IP missing from KUBE-CLUSTER-IP")
	}
	if !f.ipset.Has(setLoopBack, kipset.Entry{IP: w4.LocalPod(1), Protocol: kipset.TCP, Port: 8080, IP2: w4.LocalPod(1)}) {
		t.Error("endpoint missing from KUBE-LOOP-BACK")
	}

	// Affinity turns on persistence; only the service is updated.
	b := *a
	b.AffinitySeconds = 600
	before := f.ipvs.Writes()
	mustSync(t, p, changed(st, map[proxy.ServicePortName]*desired.ServicePort{a.Name: &b}))
	svc, _, _ = f.ipvs.Service(k)
	if svc.Flags&kipvs.FlagPersistent == 0 || svc.Timeout != 600 {
		t.Errorf("persistence: %+v", svc)
	}
	if n := f.ipvs.Writes() - before; n != 1 {
		t.Errorf("affinity change took %d IPVS writes, want 1", n)
	}

	// Deleting the service port removes VS, address and members.
	mustSync(t, p, changed(st, map[proxy.ServicePortName]*desired.ServicePort{a.Name: nil}))
	if _, _, ok := f.ipvs.Service(k); ok {
		t.Error("VS still there after the service went")
	}
	if addrs, _ := f.link.ListAddrs(DummyLink); len(addrs) != 0 {
		t.Errorf("addresses left: %v", addrs)
	}
	if f.ipset.Has(setClusterIP, kipset.Entry{IP: a.ClusterIP, Protocol: kipset.TCP, Port: 80}) {
		t.Error("KUBE-CLUSTER-IP member left")
	}
}

// TestSchedulerPerService: the virtual servers use the scheduler Compute
// decided for the port (the annotation's, or the default when it named
// none); a State that decided none (not computed for IPVS) gets rr.
func TestSchedulerPerService(t *testing.T) {
	f := newFakes()
	p := newProxier(f, proxy.IPv4, Options{})
	a := svcPort("a", 1, w4.LocalPod(1))
	a.Setting = &desired.PortSetting{Value: kipvs.WeightedLeastConnection}
	b := svcPort("b", 2, w4.LocalPod(2))
	b.Setting = &desired.PortSetting{Value: kipvs.SourceHashing}
	c := svcPort("c", 3, w4.LocalPod(3))
	c.Setting = &desired.PortSetting{Value: kipvs.WeightedLeastConnection, Refused: "no-such-scheduler"}
	d := svcPort("d", 4, w4.LocalPod(4))
	mustSync(t, p, baseState(proxy.IPv4, a, b, c, d))
	for sp, want := range map[*desired.ServicePort]string{a: "wlc", b: "sh", c: "wlc", d: "rr"} {
		if svc, _, _ := f.ipvs.Service(vsKey(sp.ClusterIP, 80)); svc.Scheduler != want {
			t.Errorf("%s: scheduler %q, want %q", sp.Name, svc.Scheduler, want)
		}
	}
}

func TestFrontendsAndNodePorts(t *testing.T) {
	f := newFakes()
	p := newProxier(f, proxy.IPv4, Options{})
	a := svcPort("a", 1, w4.RemotePod(1))
	a.NodePort = 30080
	a.ExternalIPs = []netip.Addr{w4.ExternalIP(1)}
	a.LoadBalancerIPs = []netip.Addr{w4.LoadBalancerIP(1)}
	a.ExternalLocal = true
	a.External = desired.Dispatch{Empty: desired.Drop}
	mustSync(t, p, baseState(proxy.IPv4, a))

	for _, k := range []kipvs.ServiceKey{vsKey(w4.ExternalIP(1), 80), vsKey(w4.LoadBalancerIP(1), 80),
		vsKey(w4.NodeIP, 30080), vsKey(w4.SecondHostIP, 30080)} {
		if got := dests(t, f, k); len(got) != 0 {
			t.Errorf("%s: eTP=Local without local endpoints should have no real servers, has %v", k, got)
		}
	}
	if _, _, ok := f.ipvs.Service(vsKey(w4.Loopback, 30080)); ok {
		t.Error("node port on loopback")
	}
	if addrs, _ := f.link.ListAddrs(DummyLink); len(addrs) != 3 {
		t.Errorf("dummy addresses %v, want cluster, external and LB IP", addrs)
	}
	for set, e := range map[string]kipset.Entry{
		setExternalIPLocal:   {IP: w4.ExternalIP(1), Protocol: kipset.TCP, Port: 80},
		setLoadBalancerLocal: {IP: w4.LoadBalancerIP(1), Protocol: kipset.TCP, Port: 80},
		setNodePortLocalTCP:  {Port: 30080},
	} {
		if !f.ipset.Has(set, e) {
			t.Errorf("%s lacks %s", set, e)
		}
	}
	if f.ipset.Has(setNodePortTCP, kipset.Entry{Port: 30080}) {
		t.Error("eTP=Local node port also in the masquerading set")
	}
}

func TestExcludedVirtualServersAreNeverDeleted(t *testing.T) {
	f := newFakes()
	foreign := kipvs.Service{ServiceKey: vsKey(netip.MustParseAddr("10.99.0.1"), 443), Scheduler: "rr"}
	stale := kipvs.Service{ServiceKey: vsKey(w4.ClusterIP(77), 80), Scheduler: "rr"}
	for _, s := range []kipvs.Service{foreign, stale} {
		if err := f.ipvs.AddService(s); err != nil {
			t.Fatal(err)
		}
	}
	p := newProxier(f, proxy.IPv4, Options{ExcludeCIDRs: []netip.Prefix{netip.MustParsePrefix("10.99.0.0/16")}})
	mustSync(t, p, baseState(proxy.IPv4, svcPort("a", 1, w4.LocalPod(1))))
	if _, _, ok := f.ipvs.Service(foreign.ServiceKey); !ok {
		t.Error("excluded VS deleted by sync")
	}
	if _, _, ok := f.ipvs.Service(stale.ServiceKey); ok {
		t.Error("stale VS of ours survived the first sync")
	}
	if err := p.Cleanup(context.Background()); err != nil {
		t.Fatal(err)
	}
	if svcs, _ := f.ipvs.ListServices(); len(svcs) != 1 || svcs[0].ServiceKey != foreign.ServiceKey {
		t.Errorf("after Cleanup: %v, want only the excluded VS", svcs)
	}
}

func TestGracefulTermination(t *testing.T) {
	f := newFakes()
	p := newProxier(f, proxy.IPv4, Options{GracePeriod: 10 * time.Minute})
	st, a, b, k, gone := drainOne(t, f, p, 3)
	if got := dests(t, f, k); got[gone] != 0 || len(got) != 2 {
		t.Fatalf("removed endpoint: %v, want it kept at weight 0", got)
	}
	mustReap(t, p)
	if _, ok := dests(t, f, k)[gone]; !ok {
		t.Fatal("reaped with an active connection")
	}
	// Closing connections (inactive) do not hold a TCP real server.
	if err := f.ipvs.SetConnections(k, gone, 0, 3); err != nil {
		t.Fatal(err)
	}
	mustReap(t, p)
	if _, ok := dests(t, f, k)[gone]; ok {
		t.Error("TCP real server with only inactive connections not reaped")
	}

	// Coming back while terminating restores weight 1 and stops the reaper.
	mustSync(t, p, changed(st, map[proxy.ServicePortName]*desired.ServicePort{a.Name: a}))
	st = changed(st, map[proxy.ServicePortName]*desired.ServicePort{a.Name: b})
	mustSync(t, p, st)
	if err := f.ipvs.SetConnections(k, gone, 5, 0); err != nil {
		t.Fatal(err)
	}
	mustSync(t, p, changed(st, map[proxy.ServicePortName]*desired.ServicePort{a.Name: a}))
	mustReap(t, p)
	if got := dests(t, f, k); got[gone] != 1 {
		t.Errorf("returning endpoint: %v, want weight 1", got)
	}

	// The wait is bounded.
	mustSync(t, p, changed(st, map[proxy.ServicePortName]*desired.ServicePort{a.Name: b}))
	f.clock.Step(9 * time.Minute)
	mustReap(t, p)
	if _, ok := dests(t, f, k)[gone]; !ok {
		t.Fatal("reaped before the grace period with active connections")
	}
	f.clock.Step(2 * time.Minute)
	mustReap(t, p)
	if _, ok := dests(t, f, k)[gone]; ok {
		t.Error("not reaped after the grace period")
	}
}

func TestUDPWaitsForInactiveFlows(t *testing.T) {
	f := newFakes()
	p := newProxier(f, proxy.IPv4, Options{})
	a := svcPort("dns", 1, w4.LocalPod(1), w4.LocalPod(2))
	a.Protocol, a.Name.Protocol = proxy.UDP, proxy.UDP
	st := baseState(proxy.IPv4, a)
	mustSync(t, p, st)
	k := kipvs.ServiceKey{Addr: a.ClusterIP, Protocol: kipvs.UDP, Port: 80}
	gone := ep(w4.LocalPod(2))
	if err := f.ipvs.SetConnections(k, gone, 0, 2); err != nil {
		t.Fatal(err)
	}
	b := *a
	b.Internal = desired.Dispatch{Endpoints: a.Internal.Endpoints[:1]}
	mustSync(t, p, changed(st, map[proxy.ServicePortName]*desired.ServicePort{a.Name: &b}))
	reapedOnceIdle(t, f, p, k, gone)
}

// reapedOnceIdle checks that the draining real server gone of k is kept
// while it has connections, and reaped once it has none.
func reapedOnceIdle(t *testing.T, f *fakes, p *Proxier, k kipvs.ServiceKey, gone netip.AddrPort) {
	t.Helper()
	mustReap(t, p)
	if _, ok := dests(t, f, k)[gone]; !ok {
		t.Fatal("real server reaped while it has connections")
	}
	_ = f.ipvs.SetConnections(k, gone, 0, 0)
	mustReap(t, p)
	if _, ok := dests(t, f, k)[gone]; ok {
		t.Error("real server without connections not reaped")
	}
}

// drainOne syncs service port a with two endpoints through p, gives the
// second one active connections (and inactive ones), and syncs b, a
// without it: the real server gone drains. It returns the State after,
// a, b, the virtual server and gone.
func drainOne(t *testing.T, f *fakes, p *Proxier, inactive int) (*desired.State, *desired.ServicePort, *desired.ServicePort, kipvs.ServiceKey, netip.AddrPort) {
	t.Helper()
	a := svcPort("a", 1, w4.LocalPod(1), w4.LocalPod(2))
	st := baseState(proxy.IPv4, a)
	mustSync(t, p, st)
	k := vsKey(a.ClusterIP, 80)
	gone := ep(w4.LocalPod(2))
	if err := f.ipvs.SetConnections(k, gone, 1, inactive); err != nil {
		t.Fatal(err)
	}
	b := svcPort("a", 1, w4.LocalPod(1))
	st = changed(st, map[proxy.ServicePortName]*desired.ServicePort{a.Name: b})
	mustSync(t, p, st)
	return st, a, b, k, gone
}

func mustReap(t *testing.T, p *Proxier) {
	t.Helper()
	if err := p.Reap(); err != nil {
		t.Fatalf("Reap: %v", err)
	}
}

// TestRestartAdoptsWithoutWrites: a new process over a kernel programmed
// by the previous one, with the same state, changes nothing.
func TestRestartAdoptsWithoutWrites(t *testing.T) {
	f := newFakes()
	a := svcPort("a", 1, w4.LocalPod(1), w4.RemotePod(1))
	a.AffinitySeconds = 300
	a.NodePort = 30080
	a.LoadBalancerIPs = []netip.Addr{w4.LoadBalancerIP(1)}
	a.AllowedSources = []netip.Prefix{netip.MustParsePrefix("203.0.113.0/24")}
	st := baseState(proxy.IPv4, a, svcPort("b", 2))
	mustSync(t, newProxier(f, proxy.IPv4, Options{}), st)
	dump := f.ipvs.Dump()
	before := f.writes()

	mustSync(t, newProxier(f, proxy.IPv4, Options{}), st)
	if n := f.writes() - before; n != 0 {
		t.Errorf("restart with unchanged state made %d writes", n)
	}
	if got := f.ipvs.Dump(); got != dump {
		t.Errorf("IPVS table changed:\n%s\nwas:\n%s", got, dump)
	}
}

// TestRestartAdoptsDrainingRealServers: a real server the previous
// process left draining (weight 0) is adopted as it is, with no write, and
// reaped by the new process once its connections are gone.
func TestRestartAdoptsDrainingRealServers(t *testing.T) {
	f := newFakes()
	st, _, _, k, gone := drainOne(t, f, newProxier(f, proxy.IPv4, Options{}), 0)
	before := f.writes()

	p := newProxier(f, proxy.IPv4, Options{})
	st.Changed = nil
	mustSync(t, p, st)
	if n := f.writes() - before; n != 0 {
		t.Errorf("restart with a draining real server made %d writes", n)
	}
	if got := dests(t, f, k); got[gone] != 0 || len(got) != 2 {
		t.Fatalf("after the restart: %v, want the draining real server kept at weight 0", got)
	}
	reapedOnceIdle(t, f, p, k, gone)
}

func TestUnchangedResyncWritesNothing(t *testing.T) {
	f := newFakes()
	p := newProxier(f, proxy.IPv4, Options{})
	st := baseState(proxy.IPv4, svcPort("a", 1, w4.LocalPod(1)))
	mustSync(t, p, st)
	before, restores := f.writes(), len(f.ipt.Restores)
	mustSync(t, p, changed(st, nil))
	st.Changed = nil // a periodic full sync
	mustSync(t, p, st)
	if n := f.writes() - before; n != 0 {
		t.Errorf("resync made %d writes", n)
	}
	if n := len(f.ipt.Restores) - restores; n != 1 {
		t.Errorf("%d iptables restores, want 1 (only the full sync rewrites the rules)", n)
	}
}

func TestFailedSyncRecovers(t *testing.T) {
	f := newFakes()
	p := newProxier(f, proxy.IPv4, Options{})
	a := svcPort("a", 1, w4.LocalPod(1))
	st := baseState(proxy.IPv4, a)
	f.ipvs.FailOn = func(op string, _ kipvs.ServiceKey) error {
		if op == "add-destination" {
			return errors.New("injected")
		}
		return nil
	}
	if err := p.Sync(context.Background(), st, proxytest.ModeOf(st)); err == nil {
		t.Fatal("sync with a failing kernel succeeded")
	}
	f.ipvs.FailOn = nil
	// After a failure the Proxier refuses a partial sync; the syncer's
	// answer to a failure is a recovery sync.
	next := changed(st, nil)
	if err := p.Sync(context.Background(), next, proxy.PartialSync); !errors.Is(err, proxy.ErrFullSyncNeeded) {
		t.Fatalf("partial sync after a failure: %v, want proxy.ErrFullSyncNeeded", err)
	}
	if err := p.Sync(context.Background(), next, proxy.RecoverySync); err != nil {
		t.Fatal(err)
	}
	if got := dests(t, f, vsKey(a.ClusterIP, 80)); got[ep(w4.LocalPod(1))] != 1 {
		t.Errorf("after recovery: %v", got)
	}
}

func TestInitSysctlsAndTimeouts(t *testing.T) {
	for _, c := range []struct {
		kernel    string
		reuseMode bool
	}{{"5.4.0-150-generic", true}, {"5.10.0-28-amd64", false}, {"6.1.0", false}} {
		f := newFakes()
		p := NewWithClients(proxy.IPv4, Options{StrictARP: true, TCPTimeout: time.Hour, UDPTimeout: time.Minute},
			f.clientsWith(func() (string, error) { return c.kernel, nil }))
		if err := p.Init(context.Background()); err != nil {
			t.Fatal(err)
		}
		for name, want := range map[string]string{"net/ipv4/vs/conntrack": "1", "net/ipv4/vs/expire_nodest_conn": "1",
			"net/ipv4/vs/expire_quiescent_template": "1", "net/ipv4/ip_forward": "1",
			"net/ipv4/conf/all/arp_ignore": "1", "net/ipv4/conf/all/arp_announce": "2"} {
			if f.sys[name] != want {
				t.Errorf("%s: %s=%q, want %q", c.kernel, name, f.sys[name], want)
			}
		}
		if _, set := f.sys["net/ipv4/vs/conn_reuse_mode"]; set != c.reuseMode {
			t.Errorf("%s: conn_reuse_mode set=%v, want %v", c.kernel, set, c.reuseMode)
		}
		if got := f.ipvs.Timeouts(); got.TCP != time.Hour || got.UDP != time.Minute || got.TCPFin != 0 {
			t.Errorf("timeouts %+v", got)
		}
	}
}

func TestCleanupRemovesEverything(t *testing.T) {
	f := newFakes()
	p := newProxier(f, proxy.IPv4, Options{})
	mustSync(t, p, baseState(proxy.IPv4, svcPort("a", 1, w4.LocalPod(1))))
	if err := p.Cleanup(context.Background()); err != nil {
		t.Fatal(err)
	}
	if svcs, _ := f.ipvs.ListServices(); len(svcs) != 0 {
		t.Errorf("virtual servers left: %v", svcs)
	}
	if sets, _ := f.ipset.ListSets(); len(sets) != 0 {
		t.Errorf("ipsets left: %v", sets)
	}
	if f.link.HasLink(DummyLink) {
		t.Error("kube-ipvs0 left")
	}
	if dump := f.ipt.Dump(); strings.Contains(dump, "KUBE-") {
		t.Errorf("iptables rules left:\n%s", dump)
	}
}

func TestIPv6SetNames(t *testing.T) {
	cases := map[string]string{
		setClusterIP:         "KUBE-6-CLUSTER-IP",
		setLBSourceCIDR:      "KUBE-6-LOAD-BALANCER-SOURCE-CID",
		setNodePortLocalSCTP: "KUBE-6-NODE-PORT-LOCAL-SCTP-HAS",
	}
	for base, want := range cases {
		if got := setName(proxy.IPv6, base); got != want {
			t.Errorf("%s: got %s, want %s", base, got, want)
		}
		if setName(proxy.IPv4, base) != base {
			t.Errorf("IPv4 name of %s changed", base)
		}
	}
}

// TestNodePortsOnBoundAddrs: node ports get a virtual server on exactly the
// addresses desired resolved (NodePortAddrs.Bound), whatever the host's
// links hold: the backend reads no host addresses of its own. A change of
// them makes the syncer's next sync full (State.SameGlobals).
func TestNodePortsOnBoundAddrs(t *testing.T) {
	f := newFakes()
	p := newProxier(f, proxy.IPv4, Options{})
	a := svcPort("a", 1, w4.RemotePod(1))
	a.NodePort = 30080
	st := baseState(proxy.IPv4, a)
	st.NodePorts.Bound = []netip.Addr{w4.SecondHostIP}
	mustSync(t, p, st)
	nodePortVS := func() []netip.Addr {
		var out []netip.Addr
		for _, ip := range []netip.Addr{w4.NodeIP, w4.SecondHostIP, w4.Loopback} {
			if _, _, ok := f.ipvs.Service(vsKey(ip, 30080)); ok {
				out = append(out, ip)
			}
		}
		return out
	}
	if got := nodePortVS(); !slices.Equal(got, []netip.Addr{w4.SecondHostIP}) {
		t.Errorf("node port on %v, want only the bound %s", got, w4.SecondHostIP)
	}
	next := changed(st, nil)
	next.NodePorts.Bound = []netip.Addr{w4.NodeIP}
	if next.SameGlobals(st) {
		t.Fatal("the bound addresses are a global input: the syncer must make this sync full")
	}
	if err := p.Sync(context.Background(), next, proxy.FullSync); err != nil {
		t.Fatal(err)
	}
	if got := nodePortVS(); !slices.Equal(got, []netip.Addr{w4.NodeIP}) {
		t.Errorf("after the addresses changed: node port on %v, want only %s", got, w4.NodeIP)
	}
}
