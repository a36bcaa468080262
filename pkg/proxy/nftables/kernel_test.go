package nftables_test

import (
	"context"
	"fmt"
	"net/netip"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/svcproxy/svcproxy/internal/netnstest"
	"github.com/svcproxy/svcproxy/pkg/proxy"
	"github.com/svcproxy/svcproxy/pkg/proxy/desired"
	"github.com/svcproxy/svcproxy/pkg/proxy/nftables"
)

// The Services every family gets. ip is each one's address slot; node ports
// come in threes (TCP, UDP, SCTP).
func (e *kernelEnv) services() []svcSpec {
	all := []epSpec{{pod: "pod-a"}, {pod: "pod-b"}, {pod: "pod-c"}, {pod: "pod-r"}}
	local3 := []epSpec{{pod: "pod-a"}, {pod: "pod-b"}, {pod: "pod-c"}}
	return []svcSpec{
		{name: "spread", ip: 10, nodePort: 30010, external: true, lb: true, endpoints: all},
		{name: "ranges", ip: 11, nodePort: 30020, lb: true, endpoints: []epSpec{{pod: "pod-a"}},
			ranges: func(e *kernelEnv) []string {
				return []string{netip.PrefixFrom(e.allowed[0], 32).String(), netip.PrefixFrom(e.allowed[1], 128).String()}
			}},
		{name: "sticky", ip: 12, endpoints: local3, affinity: 10800},
		{name: "sticky-short", ip: 13, endpoints: local3, affinity: 1},
		{name: "etp-local", ip: 14, nodePort: 30030, etpLocal: true, endpoints: []epSpec{{pod: "pod-a"}, {pod: "pod-r"}}},
		{name: "etp-local-none", ip: 15, nodePort: 30040, etpLocal: true, endpoints: []epSpec{{pod: "pod-r"}}},
		{name: "itp-local", ip: 16, itpLocal: true, endpoints: []epSpec{{pod: "pod-a"}, {pod: "pod-r"}}},
		{name: "itp-local-none", ip: 17, itpLocal: true, endpoints: []epSpec{{pod: "pod-r"}}},
		{name: "no-endpoints", ip: 18, nodePort: 30050},
		{name: "hairpin", ip: 19, endpoints: []epSpec{{pod: "pod-a"}}},
		{name: "terminating", ip: 20, endpoints: []epSpec{{pod: "pod-b", terminating: true}}},
		{name: "terminating-mixed", ip: 21, endpoints: []epSpec{{pod: "pod-b", terminating: true}, {pod: "pod-c"}}},
		{name: "churn", ip: 22, endpoints: local3},
	}
}

func (e *kernelEnv) serviceNamed(t *testing.T, name string) svcSpec {
	for _, s := range e.services() {
		if s.name == name {
			return s
		}
	}
	t.Fatalf("no test service %q", name)
	return svcSpec{}
}

// TestKernel programs both families into a real node namespace and sends
// real TCP, UDP and SCTP traffic through it.
func TestKernel(t *testing.T) {
	requireKernel(t)
	env := newKernelEnv(t)
	proxiers := map[proxy.IPFamily]*nftables.Proxier{}
	worlds := map[proxy.IPFamily]*world{}
	for _, f := range families {
		worlds[f.family] = env.newWorld(f)
		proxiers[f.family] = env.newProxier(t, f)
		env.sync(t, proxiers[f.family], worlds[f.family].apply(t, env.services()...))
	}
	for _, f := range families {
		t.Run(string(f.family), func(t *testing.T) {
			env.trafficCases(t, f)
			env.endpointRemoved(t, f, proxiers[f.family], worlds[f.family])
			env.restartKeepsConnection(t, f, worlds[f.family].state)
		})
	}
	t.Run("cleanup", func(t *testing.T) {
		for _, f := range families {
			if err := env.node1.NS.Do(func() error { return proxiers[f.family].Cleanup(context.Background()) }); err != nil {
				t.Fatalf("%s cleanup: %v", f.family, err)
			}
		}
		tables, err := env.node1.NS.ListTables(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if len(tables) != 0 {
			t.Errorf("tables left after Cleanup: %q", tables)
		}
	})
}

func (e *kernelEnv) trafficCases(t *testing.T, f fam) {
	t.Run("ClusterIPBalancesOverAllEndpoints", func(t *testing.T) { e.clusterIPBalances(t, f) })
	t.Run("NodePortExternalIPAndLBIP", func(t *testing.T) { e.externalFrontends(t, f) })
	t.Run("SourceRanges", func(t *testing.T) { e.sourceRanges(t, f) })
	t.Run("Affinity", func(t *testing.T) { e.affinity(t, f) })
	t.Run("AffinityExpires", func(t *testing.T) { e.affinityExpires(t, f) })
	t.Run("ExternalTrafficPolicyLocal", func(t *testing.T) { e.externalLocal(t, f) })
	t.Run("InternalTrafficPolicyLocal", func(t *testing.T) { e.internalLocal(t, f) })
	t.Run("RejectWithoutEndpoints", func(t *testing.T) { e.reject(t, f) })
	t.Run("Hairpin", func(t *testing.T) { e.hairpin(t, f) })
	t.Run("TerminatingFallback", func(t *testing.T) { e.terminating(t, f) })
}

// dropTimeout is how long a client waits where the test expects a drop.
const dropTimeout = 700 * time.Millisecond

func (e *kernelEnv) fromClient(f fam) netnstest.Client {
	return netnstest.Client{NS: e.client, Source: f.pick(e.allowed)}
}

func (e *kernelEnv) fromPod(name string) netnstest.Client {
	return netnstest.Client{NS: e.pods[name].NS}
}

// askMany sends n requests and returns how often each server answered.
func askMany(t *testing.T, c netnstest.Client, proto proxy.Protocol, dst netip.AddrPort, n int) map[string]int {
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

func servers(seen map[string]int) []string {
	var out []string
	for s := range seen {
		out = append(out, s)
	}
	slices.Sort(out)
	return out
}

func (e *kernelEnv) clusterIPBalances(t *testing.T, f fam) {
	dst := netip.AddrPortFrom(f.clusterIP(10), svcPort)
	want := []string{"pod-a", "pod-b", "pod-c", "pod-r"}
	for _, proto := range protocols {
		// 40 draws over 4 endpoints miss one with probability ~4e-5.
		if got := servers(askMany(t, e.fromClient(f), proto, dst, 40)); !slices.Equal(got, want) {
			t.Errorf("%s to cluster IP reached %v, want all of %v", proto, got, want)
		}
	}
	// Pod-originated traffic keeps its source (no masquerade), except when
	// it lands on the sender itself (hairpin, masqueraded).
	podB := e.pods["pod-b"].IP(f.v6)
	for _, ans := range askAll(t, e.fromPod("pod-b"), proxy.TCP, dst, 8) {
		if hairpin := ans.Server == "pod-b"; hairpin == (ans.Peer.Addr() == podB) {
			t.Errorf("pod-b → cluster IP → %s arrived from %s; want pod-b's own address unless hairpinned", ans.Server, ans.Peer)
		}
	}
}

func (e *kernelEnv) externalFrontends(t *testing.T, f fam) {
	client := f.pick(e.allowed)
	for i, proto := range protocols {
		for _, dst := range []netip.AddrPort{
			netip.AddrPortFrom(e.node1.IP(f.v6), uint16(30010+i)),
			netip.AddrPortFrom(f.externalIP(10), svcPort),
			netip.AddrPortFrom(f.lbIP(10), svcPort),
		} {
			ans, err := e.fromClient(f).Ask(proto, dst)
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

func (e *kernelEnv) sourceRanges(t *testing.T, f fam) {
	lb := netip.AddrPortFrom(f.lbIP(11), svcPort)
	if _, err := e.fromClient(f).Ask(proxy.TCP, lb); err != nil {
		t.Errorf("allowed client to LB IP: %v", err)
	}
	blocked := netnstest.Client{NS: e.client, Source: f.pick(e.denied), Timeout: dropTimeout}
	for _, proto := range []proxy.Protocol{proxy.TCP, proxy.UDP} {
		if _, err := blocked.Ask(proto, lb); netnstest.OutcomeOf(err) != netnstest.Timeout {
			t.Errorf("blocked client %s to LB IP: %v (%s), want dropped", proto, err, netnstest.OutcomeOf(err))
		}
	}
	// Source ranges apply to LB IPs only, not to the node port.
	if _, err := blocked.Ask(proxy.TCP, netip.AddrPortFrom(e.node1.IP(f.v6), 30020)); err != nil {
		t.Errorf("blocked client to the node port: %v, want allowed", err)
	}
}

func (e *kernelEnv) affinity(t *testing.T, f fam) {
	dst := netip.AddrPortFrom(f.clusterIP(12), svcPort)
	for _, proto := range []proxy.Protocol{proxy.TCP, proxy.UDP} {
		if got := askMany(t, e.fromClient(f), proto, dst, 20); len(got) != 1 {
			t.Errorf("%s with ClientIP affinity: 20 connections reached %v, want one endpoint", proto, got)
		}
	}
}

// affinityExpires: with a 1 s timeout, a client that waits longer than that
// between connections is balanced afresh, so over several rounds it must
// reach more than one endpoint (each round stays on one with p = 1/3).
func (e *kernelEnv) affinityExpires(t *testing.T, f fam) {
	dst := netip.AddrPortFrom(f.clusterIP(13), svcPort)
	seen := map[string]int{}
	for round := 0; round < 10 && len(seen) < 2; round++ {
		if round > 0 {
			time.Sleep(1500 * time.Millisecond)
		}
		burst := askMany(t, e.fromClient(f), proxy.TCP, dst, 3)
		if len(burst) != 1 {
			t.Fatalf("round %d: a burst inside the timeout reached %v, want one endpoint", round, burst)
		}
		for s := range burst {
			seen[s]++
		}
	}
	if len(seen) < 2 {
		t.Errorf("affinity never expired: every round reached %v", servers(seen))
	}
}

func (e *kernelEnv) externalLocal(t *testing.T, f fam) {
	client := f.pick(e.allowed)
	for i, proto := range protocols {
		dst := netip.AddrPortFrom(e.node1.IP(f.v6), uint16(30030+i))
		for _, ans := range askAll(t, e.fromClient(f), proto, dst, 10) {
			if ans.Server != "pod-a" || ans.Peer.Addr() != client {
				t.Errorf("%s eTP=Local node port: %v, want pod-a seeing the client %s", proto, ans, client)
			}
		}
		none := netnstest.Client{NS: e.client, Source: client, Timeout: dropTimeout}
		dst = netip.AddrPortFrom(e.node1.IP(f.v6), uint16(30040+i))
		if proto != proxy.SCTP { // one dropped protocol is enough to wait for
			if _, err := none.Ask(proto, dst); netnstest.OutcomeOf(err) != netnstest.Timeout {
				t.Errorf("%s eTP=Local without local endpoints: %v, want dropped", proto, err)
			}
		}
	}
}

func askAll(t *testing.T, c netnstest.Client, proto proxy.Protocol, dst netip.AddrPort, n int) []netnstest.Answer {
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

func (e *kernelEnv) internalLocal(t *testing.T, f fam) {
	dst := netip.AddrPortFrom(f.clusterIP(16), svcPort)
	if got := servers(askMany(t, e.fromPod("pod-b"), proxy.TCP, dst, 20)); !slices.Equal(got, []string{"pod-a"}) {
		t.Errorf("iTP=Local from pod-b reached %v, want only the local pod-a", got)
	}
	c := netnstest.Client{NS: e.pods["pod-b"].NS, Timeout: dropTimeout}
	if _, err := c.Ask(proxy.TCP, netip.AddrPortFrom(f.clusterIP(17), svcPort)); netnstest.OutcomeOf(err) != netnstest.Timeout {
		t.Errorf("iTP=Local without local endpoints: %v, want dropped", err)
	}
}

func (e *kernelEnv) reject(t *testing.T, f fam) {
	c := e.fromClient(f)
	for _, dst := range []struct {
		proto proxy.Protocol
		addr  netip.AddrPort
	}{
		{proxy.TCP, netip.AddrPortFrom(f.clusterIP(18), svcPort)},
		{proxy.UDP, netip.AddrPortFrom(f.clusterIP(18), svcPort)},
		{proxy.TCP, netip.AddrPortFrom(e.node1.IP(f.v6), 30050)},
	} {
		start := time.Now()
		_, err := c.Ask(dst.proto, dst.addr)
		if netnstest.OutcomeOf(err) != netnstest.Refused {
			t.Errorf("%s to %s without endpoints: %v, want refused", dst.proto, dst.addr, err)
		}
		// Refused (not timed out) already proves the reject. The bound is 1.5 s,
		// not ~0: over these veths the ICMPv6 error for the first SYN arrives
		// synchronously while connect() still holds the socket lock, so the
		// kernel drops it (TcpExtLockDroppedIcmps) and refuses the SYN
		// retransmitted after 1 s. A real network is not synchronous.
		if took := time.Since(start); took > 1500*time.Millisecond {
			t.Errorf("%s to %s: refusal took %v, want at most one SYN retransmission", dst.proto, dst.addr, took)
		}
	}
}

func (e *kernelEnv) hairpin(t *testing.T, f fam) {
	ans, err := e.fromPod("pod-a").Ask(proxy.TCP, netip.AddrPortFrom(f.clusterIP(19), svcPort))
	if err != nil {
		t.Fatalf("pod-a → its own service: %v", err)
	}
	pod := e.pods["pod-a"]
	if ans.Server != "pod-a" || ans.Peer.Addr() == pod.IP(f.v6) {
		t.Errorf("hairpin: %v, want pod-a seeing a masqueraded (node) source, not itself", ans)
	}
}

func (e *kernelEnv) terminating(t *testing.T, f fam) {
	got := servers(askMany(t, e.fromClient(f), proxy.TCP, netip.AddrPortFrom(f.clusterIP(20), svcPort), 5))
	if !slices.Equal(got, []string{"pod-b"}) {
		t.Errorf("only a serving terminating endpoint: reached %v, want pod-b", got)
	}
	got = servers(askMany(t, e.fromClient(f), proxy.TCP, netip.AddrPortFrom(f.clusterIP(21), svcPort), 20))
	if !slices.Equal(got, []string{"pod-c"}) {
		t.Errorf("ready and terminating endpoints: reached %v, want only the ready pod-c", got)
	}
}

// endpointRemoved: after pod-c leaves "churn", new connections never reach it.
func (e *kernelEnv) endpointRemoved(t *testing.T, f fam, p *nftables.Proxier, w *world) {
	t.Run("EndpointRemoved", func(t *testing.T) {
		dst := netip.AddrPortFrom(f.clusterIP(22), svcPort)
		if got := askMany(t, e.fromClient(f), proxy.TCP, dst, 30); got["pod-c"] == 0 {
			t.Fatalf("before removal pod-c got nothing (%v); the test would prove nothing", got)
		}
		spec := e.serviceNamed(t, "churn")
		spec.endpoints = slices.DeleteFunc(spec.endpoints, func(ep epSpec) bool { return ep.pod == "pod-c" })
		st := w.apply(t, spec)
		if st.Changed == nil {
			t.Fatal("expected an incremental State (Changed set), got a full one")
		}
		e.sync(t, p, st)
		for _, proto := range protocols {
			if got := askMany(t, e.fromClient(f), proto, dst, 30); got["pod-c"] != 0 {
				t.Errorf("%s after removing pod-c: %v", proto, got)
			}
		}
	})
}

// restartKeepsConnection: a new Proxier given the same State must leave the
// ruleset untouched (same handles, no rule or element events) and an
// established connection working.
func (e *kernelEnv) restartKeepsConnection(t *testing.T, f fam, st *desired.State) {
	t.Run("RestartRewritesNothing", func(t *testing.T) {
		ctx := context.Background()
		conn, err := e.fromClient(f).DialTCP(netip.AddrPortFrom(f.clusterIP(10), svcPort))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		before, err := conn.Ask()
		if err != nil {
			t.Fatal(err)
		}
		rulesBefore, err := listStatic(ctx, e.node1.NS)
		if err != nil {
			t.Fatal(err)
		}
		mon, err := e.node1.NS.StartNftMonitor()
		if err != nil {
			t.Fatal(err)
		}
		full := *st
		full.Changed = nil
		e.sync(t, e.newProxier(t, f), &full)
		events := mon.Stop()
		if rw := rewrites(events); len(rw) > 0 {
			t.Errorf("restart rewrote %d objects, e.g. %q", len(rw), rw[:min(len(rw), 5)])
		}
		if rulesAfter, err := listStatic(ctx, e.node1.NS); err != nil || rulesAfter != rulesBefore {
			t.Errorf("ruleset (with handles) changed across restart (err %v):\n%s", err, diffLines(rulesBefore, rulesAfter))
		}
		after, err := conn.Ask()
		if err != nil || after.Server != before.Server {
			t.Errorf("established connection after restart: %v, %v; before: %v", after, err, before)
		}
	})
}

// expiresField is the countdown nft prints for elements of timeout sets
// (affinity entries); it changes between two listings by itself.
var expiresField = regexp.MustCompile(` expires [0-9hms]+`)

// listStatic lists the ruleset with handles, without element countdowns.
func listStatic(ctx context.Context, ns *netnstest.NS) (string, error) {
	out, err := ns.ListRuleset(ctx)
	return expiresField.ReplaceAllString(out, ""), err
}

// rewrites returns the monitor events that touch the dataplane: anything
// on a rule or an element, and any delete or flush.
func rewrites(events []string) []string {
	var out []string
	for _, ev := range events {
		f := strings.Fields(ev)
		if len(f) >= 2 && (f[1] == "rule" || f[1] == "element" || f[0] == "delete" || f[0] == "flush") {
			out = append(out, ev)
		}
	}
	return out
}

// diffLines shows the lines only in a or only in b (enough to see what moved).
func diffLines(a, b string) string {
	inA := map[string]bool{}
	for _, l := range strings.Split(a, "\n") {
		inA[l] = true
	}
	inB := map[string]bool{}
	var out []string
	for _, l := range strings.Split(b, "\n") {
		inB[l] = true
		if !inA[l] {
			out = append(out, "+ "+l)
		}
	}
	for _, l := range strings.Split(a, "\n") {
		if !inB[l] {
			out = append(out, "- "+l)
		}
	}
	if len(out) > 20 {
		out = append(out[:20], fmt.Sprintf("... %d more", len(out)-20))
	}
	return strings.Join(out, "\n")
}
