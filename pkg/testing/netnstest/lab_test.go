package netnstest

import (
	"context"
	"net/netip"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/svcproxy/svcproxy/pkg/proxy"
)

// requireKernel: these tests program nft rules by hand.
func requireKernel(t *testing.T) { t.Helper(); RequireKernel(t, "nft") }

// A hand-written DNAT in the node namespace, so the library is tested
// against the kernel without depending on any backend.
const testRules = `
table inet netnstest {
	chain prerouting_dnat {
		type nat hook prerouting priority dstnat;
		ip daddr 172.30.0.10 meta l4proto { tcp, udp, sctp } th dport 80 dnat ip to 198.19.1.2:8080
		ip6 daddr fd00:30::10 meta l4proto { tcp, udp, sctp } th dport 80 dnat ip6 to [fd00:19:1:0::2]:8080
	}
	chain forward_filter {
		type filter hook forward priority 0;
		ip daddr 172.30.0.11 meta l4proto { tcp, udp } reject
		ip daddr 172.30.0.12 drop
	}
}`

func TestClusterEchoThroughKernel(t *testing.T) {
	requireKernel(t)
	lab := New(t)
	cluster, err := NewCluster(lab, 1)
	if err != nil {
		t.Fatal(err)
	}
	node := cluster.Nodes[0]
	pod, err := node.AddPod("pod-a")
	if err != nil {
		t.Fatal(err)
	}
	client, ids, err := cluster.AddClient("client", node, 2)
	if err != nil {
		t.Fatal(err)
	}
	for _, proto := range []proxy.Protocol{proxy.TCP, proxy.UDP, proxy.SCTP} {
		if _, err := pod.NS.Serve("pod-a", proto, 8080); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := node.NS.RunInput(context.Background(), testRules, "nft", "-f", "-"); err != nil {
		t.Fatal(err)
	}

	for _, proto := range []proxy.Protocol{proxy.TCP, proxy.UDP, proxy.SCTP} {
		for fam, vip := range map[int]string{4: "172.30.0.10", 6: "fd00:30::10"} {
			second := ids[1][0]
			if fam == 6 {
				second = ids[1][1]
			}
			c := Client{NS: client, Source: second}
			ans, err := c.Ask(proto, netip.AddrPortFrom(netip.MustParseAddr(vip), 80))
			if err != nil {
				t.Fatalf("%s to %s: %v", proto, vip, err)
			}
			if ans.Server != "pod-a" || ans.Peer.Addr() != second {
				t.Errorf("%s to %s: answer %v, want pod-a seeing %s", proto, vip, ans, second)
			}
		}
	}
}

func TestOutcomes(t *testing.T) {
	requireKernel(t)
	lab := New(t)
	cluster, err := NewCluster(lab, 1)
	if err != nil {
		t.Fatal(err)
	}
	node := cluster.Nodes[0]
	pod, err := node.AddPod("pod-a")
	if err != nil {
		t.Fatal(err)
	}
	client, _, err := cluster.AddClient("client", node, 1)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := node.NS.RunInput(context.Background(), testRules, "nft", "-f", "-"); err != nil {
		t.Fatal(err)
	}
	// The same outcomes through a child process in a cgroup (Client.Cgroup).
	c := Client{NS: client, Timeout: 500 * time.Millisecond}
	inCgroup := c
	inCgroup.Cgroup = ThrowawayCgroup(t, "svcproxy-netnstest")
	cases := []struct {
		name  string
		proto proxy.Protocol
		dst   netip.AddrPort
		want  Outcome
	}{
		{"tcp no listener", proxy.TCP, netip.AddrPortFrom(pod.IPv4, 9), Refused},
		{"udp no listener", proxy.UDP, netip.AddrPortFrom(pod.IPv4, 9), Refused},
		{"tcp reject", proxy.TCP, netip.MustParseAddrPort("172.30.0.11:80"), Refused},
		{"udp reject", proxy.UDP, netip.MustParseAddrPort("172.30.0.11:80"), Refused},
		{"tcp drop", proxy.TCP, netip.MustParseAddrPort("172.30.0.12:80"), Timeout},
		{"sctp drop", proxy.SCTP, netip.MustParseAddrPort("172.30.0.12:80"), Timeout},
	}
	for _, c := range []Client{c, inCgroup} {
		for _, tc := range cases {
			_, err := c.Ask(tc.proto, tc.dst)
			if got := OutcomeOf(err); got != tc.want {
				t.Errorf("%s (cgroup %q): outcome %s (%v), want %s", tc.name, c.Cgroup, got, err, tc.want)
			}
		}
	}
}

// TestClientInCgroup: a Client with a Cgroup asks through a child process
// that is in that cgroup, and gets the echo server's answer.
func TestClientInCgroup(t *testing.T) {
	requireKernel(t)
	cgroup := ThrowawayCgroup(t, "svcproxy-netnstest")
	lab := New(t)
	cluster, err := NewCluster(lab, 1)
	if err != nil {
		t.Fatal(err)
	}
	pod, err := cluster.Nodes[0].AddPod("pod-a")
	if err != nil {
		t.Fatal(err)
	}
	for _, proto := range []proxy.Protocol{proxy.TCP, proxy.UDP} {
		if _, err := pod.NS.Serve("pod-a", proto, 8080); err != nil {
			t.Fatal(err)
		}
	}
	c := Client{NS: pod.NS, Cgroup: cgroup}
	for _, proto := range []proxy.Protocol{proxy.TCP, proxy.UDP} {
		if ans, err := c.Ask(proto, netip.AddrPortFrom(pod.IPv6, 8080)); err != nil || ans.Server != "pod-a" || ans.Peer.Addr() != pod.IPv6 {
			t.Errorf("%s through the child: %v, %v; want pod-a seeing %s", proto, ans, err, pod.IPv6)
		}
	}
	procs, err := os.ReadFile(cgroup + "/cgroup.procs")
	if err != nil {
		t.Fatal(err)
	}
	pids := strings.Fields(string(procs))
	if len(pids) != 1 {
		t.Fatalf("the cgroup holds processes %v, want the one child", pids)
	}
	if exe, err := os.Readlink("/proc/" + pids[0] + "/exe"); err != nil || exe != testBinary(t) {
		t.Errorf("the process in the cgroup runs %q (%v), want the test binary", exe, err)
	}
	if _, err := c.DialTCP(netip.AddrPortFrom(pod.IPv6, 8080)); err == nil {
		t.Error("DialTCP with a Cgroup connected from the test process")
	}
}

func testBinary(t *testing.T) string {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	return self
}

func TestCloseDeletesNamespaces(t *testing.T) {
	requireKernel(t)
	lab, err := NewLab()
	if err != nil {
		t.Fatal(err)
	}
	a, err := lab.NewNS("a")
	if err != nil {
		lab.Close()
		t.Fatal(err)
	}
	b, err := lab.NewNS("b")
	if err != nil {
		lab.Close()
		t.Fatal(err)
	}
	if err := Veth(a, "x", b, "y"); err != nil {
		lab.Close()
		t.Fatal(err)
	}
	if err := lab.Close(); err != nil {
		t.Fatal(err)
	}
	for _, ns := range []*NS{a, b} {
		if _, err := os.Stat(ns.Path()); !os.IsNotExist(err) {
			t.Errorf("%s still exists after Close (stat: %v)", ns.Path(), err)
		}
	}
}

func TestRefusesAddressesOutsideTestRanges(t *testing.T) {
	requireKernel(t)
	lab := New(t)
	ns, err := lab.NewNS("guard")
	if err != nil {
		t.Fatal(err)
	}
	if err := ns.AddRoute(netip.MustParsePrefix("0.0.0.0/0"), netip.MustParseAddr("198.18.0.1")); err == nil {
		t.Error("default route accepted")
	}
	if err := ns.AddAddr("lo", netip.MustParsePrefix("10.1.2.3/8")); err == nil {
		t.Error("address outside the test ranges accepted")
	}
	if err := ns.Sysctl("kernel.pid_max", "1"); err == nil || !strings.Contains(err.Error(), "not per network namespace") {
		t.Errorf("non-net sysctl: %v", err)
	}
}

func TestMonitorSeesChanges(t *testing.T) {
	requireKernel(t)
	lab := New(t)
	ns, err := lab.NewNS("mon")
	if err != nil {
		t.Fatal(err)
	}
	mon, err := ns.StartNftMonitor()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ns.Run(context.Background(), "nft", "add table ip t; add chain ip t c; add rule ip t c accept"); err != nil {
		t.Fatal(err)
	}
	if _, err := ns.Run(context.Background(), "nft", "add set ip t s { type ipv4_addr ; }; add element ip t s { 10.0.0.1 }"); err != nil {
		t.Fatal(err)
	}
	txs := mon.StopTransactions()
	if events, want := mon.Stop(), []string{"add table", "add chain", "add rule", "add set", "add element"}; !slices.Equal(events, want) {
		t.Errorf("monitor events = %q, want %q", events, want)
	}
	want := [][]string{{"add table t", "add chain c", "add rule c"}, {"add set s", "add element s"}}
	if !slices.EqualFunc(txs, want, slices.Equal) {
		t.Errorf("monitor transactions = %q, want %q", txs, want)
	}
}
