package dataplane

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	F "github.com/svcproxy/svcproxy/test/e2e/framework"
)

// testWithXDP runs XDP's own scenario and the tc scenarios in ebpf mode
// with XDP in front of the tc programs (--bpf-acceleration=native). veth
// has native XDP, so native, not best-effort: a node that cannot attach
// it fails its syncs and the scenario. Each scenario first checks that
// both are attached, and before and after it that the nodes hold no
// rules of svcproxy's.
func testWithXDP(t *testing.T) {
	run := append([]scenario{{"XDPForwardsToOtherNode", testXDPForwards}}, named(tcScenarios)...)
	run = withoutRules(whenAttached(run, "tc programs and XDP", func(c *F.Cluster, n *F.Node) bool {
		return c.TCAttached(n, "eth0") && c.XDPAttached(n, "eth0")
	}))
	opts := F.Options{Mode: "ebpf", TCInterfaces: []string{"eth0"}, Acceleration: "native"}
	runScenarios(t, opts, "ebpf+xdp", run)
}

// xdpRequests is how many requests each check of testXDPForwards sends.
const xdpRequests = 20

// testXDPForwards: a node port from outside, entering through either
// node, to an endpoint on the other node, over TCP and UDP. Every request
// is answered, through the entry node (masqueraded to its address), and
// np_xdp on the entry node's eth0 sent packets of those flows out itself
// (the packets after a flow's first: the handshake's last ACK, the
// request, the reply). A node port whose endpoint is on the entry node
// is tc's alone: XDP passes its packets on.
func testXDPForwards(t *testing.T, c *F.Cluster) {
	stats, err := F.EnableBPFStats()
	if err != nil {
		t.Fatal(err)
	}
	defer stats.Close()
	n1, n2 := c.Nodes[0], c.Nodes[1]
	for _, d := range []struct {
		entry  *F.Node
		pod    *F.Pod
		remote bool
	}{{n1, c.AddPod(n2, "xb"), true}, {n2, c.AddPod(n1, "xa"), true}, {n1, c.AddPod(n1, "xl"), false}} {
		svc := c.CreateService(F.NewService("xdp-"+d.pod.Name, corev1.ServiceTypeNodePort))
		c.SetEndpoints(svc, F.EP{Pod: d.pod})
		for _, tg := range frontends(svc, d.entry.IP, true) {
			c.Expect("ext", tg, converge, F.AllOf(d.pod.Name))
			got := xdpCounts(t, c, d.entry, func() {
				want := F.AllOf(d.pod.Name)
				if d.remote {
					want = sourceIs(want, d.entry.IP)
				}
				if err := want(c.Ask("ext", tg, xdpRequests, time.Second)); err != nil {
					t.Fatalf("%s through %s: %v", tg, d.entry.Name, err)
				}
			})
			t.Logf("%s through %s to %s on %s: %d requests, np_xdp ran %d times, np_ingress %d: XDP forwarded %d packets",
				tg, d.entry.Name, d.pod.Name, d.pod.Node.Name, xdpRequests, got.XDP, got.Ingress, got.Forwarded())
			// Other traffic on eth0 (the node's API watch) passes both
			// programs, and can only lower the difference (ReadXDPCounts).
			switch {
			case d.remote && got.Forwarded() < xdpRequests/2:
				t.Errorf("%s through %s to an endpoint on %s: XDP forwarded %d packets of %d requests, want at least %d",
					tg, d.entry.Name, d.pod.Node.Name, got.Forwarded(), xdpRequests, xdpRequests/2)
			case !d.remote && got.Forwarded() >= xdpRequests/2:
				t.Errorf("%s through %s to a local endpoint: XDP forwarded %d packets, want them all passed to tc",
					tg, d.entry.Name, got.Forwarded())
			}
		}
	}
}

// xdpCounts returns the run counts on node n's eth0 that traffic adds.
func xdpCounts(t *testing.T, c *F.Cluster, n *F.Node, traffic func()) F.XDPCounts {
	t.Helper()
	before, err := c.ReadXDPCounts(n, "eth0")
	if err != nil {
		t.Fatal(err)
	}
	traffic()
	after, err := c.ReadXDPCounts(n, "eth0")
	if err != nil {
		t.Fatal(err)
	}
	return after.Sub(before)
}
