package scenario

import (
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/svcproxy/svcproxy/pkg/pipeline/desired"
	"github.com/svcproxy/svcproxy/pkg/proxy"
	"github.com/svcproxy/svcproxy/pkg/testing/netnstest"
)

// DropTimeout is how long a client waits where a check expects a drop.
const DropTimeout = 700 * time.Millisecond

// TrafficCases runs every connection check of family f against what is
// programmed on node1 now (every Service of Services, as World.Apply
// computed it): ReachableCases, then the checks that time the kernel.
func (e *Env) TrafficCases(t *testing.T, f Fam) {
	e.ReachableCases(t, f)
	t.Run("AffinityExpires", func(t *testing.T) { e.affinityExpires(t, f) })
	t.Run("RejectWithoutEndpoints", func(t *testing.T) { e.reject(t, f) })
}

// ReachableCases is the part of TrafficCases that checks where traffic
// goes, without the checks that time the kernel (affinity expiry, how fast
// a reject answers): for tests about which Services are programmed at all.
func (e *Env) ReachableCases(t *testing.T, f Fam) {
	t.Run("ClusterIPBalancesOverAllEndpoints", func(t *testing.T) { e.clusterIPBalances(t, f) })
	t.Run("NodePortExternalIPAndLBIP", func(t *testing.T) { e.externalFrontends(t, f) })
	if e.podCgroup != "" {
		t.Run("NodePortExternalIPAndLBIPTranslated", func(t *testing.T) { e.externalTranslated(t, f) })
		t.Run("ExternalTrafficPolicyLocalTranslated", func(t *testing.T) { e.externalLocalTranslated(t, f) })
	}
	t.Run("SourceRanges", func(t *testing.T) { e.sourceRanges(t, f) })
	t.Run("Affinity", func(t *testing.T) { e.affinity(t, f) })
	t.Run("ExternalTrafficPolicyLocal", func(t *testing.T) { e.externalLocal(t, f) })
	t.Run("InternalTrafficPolicyLocal", func(t *testing.T) { e.internalLocal(t, f) })
	t.Run("Hairpin", func(t *testing.T) { e.hairpin(t, f) })
	t.Run("TerminatingFallback", func(t *testing.T) { e.terminating(t, f) })
}

// AskMany sends n requests and returns how often each server answered.
func AskMany(t *testing.T, c netnstest.Client, proto proxy.Protocol, dst netip.AddrPort, n int) map[string]int {
	t.Helper()
	seen := map[string]int{}
	for i := 0; i < n; i++ {
		ans, err := c.Ask(proto, dst)
		if err != nil {
			t.Fatalf("%s %s request %d: %v", proto, dst, i, err)
		}
		seen[ans.Server]++
	}
	return seen
}

// AskAll sends n requests and returns every answer.
func AskAll(t *testing.T, c netnstest.Client, proto proxy.Protocol, dst netip.AddrPort, n int) []netnstest.Answer {
	t.Helper()
	var out []netnstest.Answer
	for i := 0; i < n; i++ {
		ans, err := c.Ask(proto, dst)
		if err != nil {
			t.Fatalf("%s to %s: %v", proto, dst, err)
		}
		out = append(out, ans)
	}
	return out
}

// Servers lists the servers of an AskMany result, sorted.
func Servers(seen map[string]int) []string {
	var out []string
	for s := range seen {
		out = append(out, s)
	}
	slices.Sort(out)
	return out
}

func (e *Env) clusterIPBalances(t *testing.T, f Fam) {
	dst := netip.AddrPortFrom(f.ClusterIP(10), SvcPort)
	want := []string{"pod-a", "pod-b", "pod-c", "pod-r"}
	for _, c := range e.clients(f) {
		for _, proto := range Protocols {
			// 40 draws over 4 endpoints miss one with probability ~4e-5.
			if got := Servers(AskMany(t, c, proto, dst, 40)); !slices.Equal(got, want) {
				t.Errorf("%s from %s to cluster IP reached %v, want all of %v", proto, c.NS.Role, got, want)
			}
		}
	}
	// Pod-originated traffic keeps its source (no masquerade), except when
	// it lands on the sender itself (hairpin, masqueraded) and was not
	// translated at connect (which sends it to itself directly).
	podB := e.Pods["pod-b"].IP(f.V6)
	for _, ans := range AskAll(t, e.FromPod("pod-b"), proxy.TCP, dst, 8) {
		masqueraded := ans.Server == "pod-b" && !e.Translated("pod-b")
		if masqueraded == (ans.Peer.Addr() == podB) {
			t.Errorf("pod-b → cluster IP → %s arrived from %s; want pod-b's own address unless hairpinned (translated at connect: %t)",
				ans.Server, ans.Peer, e.Translated("pod-b"))
		}
	}
}

func (e *Env) externalFrontends(t *testing.T, f Fam) {
	client := f.Pick(e.Allowed)
	for i, proto := range Protocols {
		for _, dst := range []netip.AddrPort{
			netip.AddrPortFrom(e.Node1.IP(f.V6), uint16(30010+i)),
			netip.AddrPortFrom(f.ExternalIP(10), SvcPort),
			netip.AddrPortFrom(f.LBIP(10), SvcPort),
		} {
			ans, err := e.FromClient(f).Ask(proto, dst)
			if err != nil {
				t.Errorf("%s to %s: %v", proto, dst, err)
				continue
			}
			// externalTrafficPolicy Cluster: the source is masqueraded.
			if ans.Peer.Addr() == client {
				t.Errorf("%s to %s reached %s with the client's address; want masquerade", proto, dst, ans.Server)
			}
		}
	}
}

func (e *Env) sourceRanges(t *testing.T, f Fam) {
	lb := netip.AddrPortFrom(f.LBIP(11), SvcPort)
	if _, err := e.FromClient(f).Ask(proxy.TCP, lb); err != nil {
		t.Errorf("allowed client to LB IP: %v", err)
	}
	blocked := netnstest.Client{NS: e.Client, Source: f.Pick(e.Denied), Timeout: DropTimeout}
	for _, proto := range []proxy.Protocol{proxy.TCP, proxy.UDP} {
		if _, err := blocked.Ask(proto, lb); netnstest.OutcomeOf(err) != netnstest.Timeout {
			t.Errorf("blocked client %s to LB IP: %v (%s), want dropped", proto, err, netnstest.OutcomeOf(err))
		}
	}
	// Source ranges apply to LB IPs only, not to the node port.
	if _, err := blocked.Ask(proxy.TCP, netip.AddrPortFrom(e.Node1.IP(f.V6), 30020)); err != nil {
		t.Errorf("blocked client to the node port: %v, want allowed", err)
	}
}

func (e *Env) affinity(t *testing.T, f Fam) {
	dst := netip.AddrPortFrom(f.ClusterIP(12), SvcPort)
	for _, c := range e.clients(f) {
		for _, proto := range []proxy.Protocol{proxy.TCP, proxy.UDP} {
			if got := AskMany(t, c, proto, dst, 20); len(got) != 1 {
				t.Errorf("%s from %s with ClientIP affinity: 20 connections reached %v, want one endpoint", proto, c.NS.Role, got)
			}
		}
	}
}

// affinityExpires: with a 1 s timeout, a client that waits longer than that
// between connections is balanced afresh, so over several rounds it must
// reach more than one endpoint (each round stays on one with p = 1/3).
func (e *Env) affinityExpires(t *testing.T, f Fam) {
	dst := netip.AddrPortFrom(f.ClusterIP(13), SvcPort)
	for _, c := range e.clients(f) {
		seen := map[string]int{}
		for round := 0; round < 10 && len(seen) < 2; round++ {
			if round > 0 {
				time.Sleep(1500 * time.Millisecond)
			}
			burst := AskMany(t, c, proxy.TCP, dst, 3)
			if len(burst) != 1 {
				t.Fatalf("round %d from %s: a burst inside the timeout reached %v, want one endpoint", round, c.NS.Role, burst)
			}
			for s := range burst {
				seen[s]++
			}
		}
		if len(seen) < 2 {
			t.Errorf("affinity from %s never expired: every round reached %v", c.NS.Role, Servers(seen))
		}
	}
}

func (e *Env) externalLocal(t *testing.T, f Fam) {
	client := f.Pick(e.Allowed)
	for i, proto := range Protocols {
		dst := netip.AddrPortFrom(e.Node1.IP(f.V6), uint16(30030+i))
		for _, ans := range AskAll(t, e.FromClient(f), proto, dst, 10) {
			if ans.Server != "pod-a" || ans.Peer.Addr() != client {
				t.Errorf("%s eTP=Local node port: %v, want pod-a seeing the client %s", proto, ans, client)
			}
		}
		none := netnstest.Client{NS: e.Client, Source: client, Timeout: DropTimeout}
		dst = netip.AddrPortFrom(e.Node1.IP(f.V6), uint16(30040+i))
		if proto != proxy.SCTP { // one dropped protocol is enough to wait for
			if _, err := none.Ask(proto, dst); netnstest.OutcomeOf(err) != netnstest.Timeout {
				t.Errorf("%s eTP=Local without local endpoints: %v, want dropped", proto, err)
			}
		}
	}
}

func (e *Env) internalLocal(t *testing.T, f Fam) {
	dst := netip.AddrPortFrom(f.ClusterIP(16), SvcPort)
	if got := Servers(AskMany(t, e.FromPod("pod-b"), proxy.TCP, dst, 20)); !slices.Equal(got, []string{"pod-a"}) {
		t.Errorf("iTP=Local from pod-b reached %v, want only the local pod-a", got)
	}
	c := e.FromPod("pod-b")
	c.Timeout = DropTimeout
	if _, err := c.Ask(proxy.TCP, netip.AddrPortFrom(f.ClusterIP(17), SvcPort)); netnstest.OutcomeOf(err) != netnstest.Timeout {
		t.Errorf("iTP=Local without local endpoints: %v, want dropped", err)
	}
}

func (e *Env) reject(t *testing.T, f Fam) {
	for _, c := range e.clients(f) {
		e.rejectFrom(t, f, c)
	}
}

func (e *Env) rejectFrom(t *testing.T, f Fam, c netnstest.Client) {
	for _, dst := range []struct {
		proto proxy.Protocol
		addr  netip.AddrPort
	}{
		{proxy.TCP, netip.AddrPortFrom(f.ClusterIP(18), SvcPort)},
		{proxy.UDP, netip.AddrPortFrom(f.ClusterIP(18), SvcPort)},
		{proxy.TCP, netip.AddrPortFrom(e.Node1.IP(f.V6), 30050)},
	} {
		start := time.Now()
		_, err := c.Ask(dst.proto, dst.addr)
		if netnstest.OutcomeOf(err) != netnstest.Refused {
			t.Errorf("%s from %s to %s without endpoints: %v, want refused", dst.proto, c.NS.Role, dst.addr, err)
		}
		// Refused (not timed out) already proves the reject. The bound is
		// 1.5 s, not ~0: over these veths the ICMPv6 error for the first
		// SYN arrives synchronously while connect() still holds the socket
		// lock, so the kernel drops it (TcpExtLockDroppedIcmps) and refuses
		// the SYN retransmitted after 1 s. A real network is not synchronous.
		if took := time.Since(start); took > 1500*time.Millisecond {
			t.Errorf("%s to %s: refusal took %v, want at most one SYN retransmission", dst.proto, dst.addr, took)
		}
	}
}

func (e *Env) hairpin(t *testing.T, f Fam) {
	ans, err := e.FromPod("pod-a").Ask(proxy.TCP, netip.AddrPortFrom(f.ClusterIP(19), SvcPort))
	if err != nil {
		t.Fatalf("pod-a → its own service: %v", err)
	}
	self := e.Pods["pod-a"].IP(f.V6)
	switch {
	case e.Translated("pod-a"):
		// Translated at connect, the connection goes from pod-a to its own
		// address without leaving the pod: no masquerade is needed for the
		// answer to come back, and none happens.
		if ans.Server != "pod-a" || ans.Peer.Addr() != self {
			t.Errorf("hairpin translated at connect: %v, want pod-a seeing itself (%s)", ans, self)
		}
	case ans.Server != "pod-a" || ans.Peer.Addr() == self:
		t.Errorf("hairpin: %v, want pod-a seeing a masqueraded (node) source, not itself", ans)
	}
}

func (e *Env) terminating(t *testing.T, f Fam) {
	for _, c := range e.clients(f) {
		got := Servers(AskMany(t, c, proxy.TCP, netip.AddrPortFrom(f.ClusterIP(20), SvcPort), 5))
		if !slices.Equal(got, []string{"pod-b"}) {
			t.Errorf("only a serving terminating endpoint, from %s: reached %v, want pod-b", c.NS.Role, got)
		}
		got = Servers(AskMany(t, c, proxy.TCP, netip.AddrPortFrom(f.ClusterIP(21), SvcPort), 20))
		if !slices.Equal(got, []string{"pod-c"}) {
			t.Errorf("ready and terminating endpoints, from %s: reached %v, want only the ready pod-c", c.NS.Role, got)
		}
	}
}

// EndpointRemoved removes pod-c from "churn" with an incremental State
// handed to sync, then checks that new connections never reach it.
func (e *Env) EndpointRemoved(t *testing.T, f Fam, w *World, sync func(t *testing.T, st *desired.State)) {
	t.Run("EndpointRemoved", func(t *testing.T) {
		dst := netip.AddrPortFrom(f.ClusterIP(22), SvcPort)
		for _, c := range e.clients(f) {
			if got := AskMany(t, c, proxy.TCP, dst, 30); got["pod-c"] == 0 {
				t.Fatalf("before removal pod-c got nothing from %s (%v); the test would prove nothing", c.NS.Role, got)
			}
		}
		spec := e.ServiceNamed(t, "churn")
		spec.Endpoints = slices.DeleteFunc(spec.Endpoints, func(ep EPSpec) bool { return ep.Pod == "pod-c" })
		st := w.Apply(t, spec)
		if st.Changed == nil {
			t.Fatal("expected an incremental State (Changed set), got a full one")
		}
		sync(t, st)
		for _, c := range e.clients(f) {
			for _, proto := range Protocols {
				if got := AskMany(t, c, proto, dst, 30); got["pod-c"] != 0 {
					t.Errorf("%s from %s after removing pod-c: %v", proto, c.NS.Role, got)
				}
			}
		}
	})
}

// KeepsConnection opens a TCP connection to "spread"'s cluster IP, runs
// during (a restart, say), and checks the same connection still reaches
// the same endpoint afterwards.
func (e *Env) KeepsConnection(t *testing.T, f Fam, during func()) {
	t.Helper()
	conn, err := e.FromClient(f).DialTCP(netip.AddrPortFrom(f.ClusterIP(10), SvcPort))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	before, err := conn.Ask()
	if err != nil {
		t.Fatal(err)
	}
	during()
	after, err := conn.Ask()
	if err != nil || after.Server != before.Server {
		t.Errorf("established connection: after %v (err %v); before %v", after, err, before)
	}
}
