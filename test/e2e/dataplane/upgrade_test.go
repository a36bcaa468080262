package dataplane

import (
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	F "github.com/svcproxy/svcproxy/test/e2e/framework"
)

// newServiceLimit bounds how soon after a proxy's start (once both
// families have synced) a Service created through the API answers.
const newServiceLimit = 2 * time.Second

// tcDrainLimit bounds how long a start of this build without
// --bpf-tc-interfaces takes the tc programs off: the longest it waits for
// a connection they translated (an established one's idle bound, two
// minutes), and the time its start takes.
const tcDrainLimit = 2*time.Minute + converge

// testUpgradeAndDowngradeUnderLoad changes node 1's svcproxy image the way
// a DaemonSet rollout does (SIGTERM, the other binary started with the
// same configuration): from this build to the earlier svcproxy pinned in
// hack/tools/svcproxy-previous (written before the nftables layout marker,
// so the two leave tables of different layouts; in ebpf mode, which that
// build lacks, v0.1.0 from hack/tools/svcproxy-previous-ebpf, whose pins
// this build adopts), back to this build, to the
// earlier one again and back, while pods and an outside client keep
// connecting through node 1 in both families and over UDP. Not one
// connection may fail, no sync may fail, and after each start a new Service
// answers within 2 s of its EndpointSlice. Node 1 follows the API while it
// runs the earlier svcproxy: an endpoint removed and a Service deleted
// then are gone from its node ports, and stay so after the upgrade. With
// ebpf mode's tc programs on, which v0.1.0 lacks and cannot remove, each
// downgrade follows the procedure of docs/user/migration.md: node 1 first
// restarts once without --bpf-tc-interfaces, which drains the programs
// and takes them off.
func testUpgradeAndDowngradeUnderLoad(t *testing.T, c *F.Cluster) {
	changeImagesUnderLoad(t, c, "upgrade", F.PreviousBinary(t, c.Opts.Mode), false)
}

// testDowngradeWithTCUnderLoad is the same with the tc programs on both
// sides: node 1 goes to and from the earlier svcproxy with them pinned in
// hack/tools/svcproxy-previous-ebpf-tc, whose np_maglev has another
// layout than this build's. Each start must succeed, with the tc programs
// attached, and follow the API.
func testDowngradeWithTCUnderLoad(t *testing.T, c *F.Cluster) {
	n1 := c.Nodes[0]
	n1.BinTC = true
	t.Cleanup(func() { n1.BinTC = false })
	changeImagesUnderLoad(t, c, "downgrade", F.PreviousBinary(t, "ebpf-tc"), true)
}

// changeImagesUnderLoad is both scenarios, their objects named after
// name: previous is the earlier svcproxy; prevTC says it runs the tc
// programs too.
func changeImagesUnderLoad(t *testing.T, c *F.Cluster, name, previous string, prevTC bool) {
	n1, n2 := c.Nodes[0], c.Nodes[1]
	a, b := c.AddPod(n1, name[:2]+"a"), c.AddPod(n2, name[:2]+"b")
	svc, v4, v6 := dualStackNodePort(t, c, name, F.EP{Pod: a}, F.EP{Pod: b})
	_, np := port(svc, corev1.ProtocolTCP)
	follow := newFollowed(t, c, n1, name, F.EP{Pod: a}, F.EP{Pod: b})
	loads := startLoads(t, c, throughNode(n1, v4, v6, np), a.Name, b.Name)
	t.Cleanup(func() { n1.Bin, n1.NoTC = "", false })
	withTC := c.TCAttached(n1, "eth0")
	for i, step := range []struct{ what, bin string }{
		{"downgrade to the previous svcproxy", previous},
		{"upgrade to this svcproxy", ""},
		{"downgrade again", previous},
		{"upgrade again", ""},
	} {
		if withTC && !prevTC && step.bin != "" {
			removeTCBefore(t, c, n1, step.what)
		}
		changeImage(t, c, n1, step.what, step.bin)
		if withTC && (prevTC || step.bin == "") && !c.TCAttached(n1, "eth0") {
			t.Errorf("%s: no tc programs on node 1's eth0", step.what)
		}
		switch i {
		case 0:
			follow.change(t, c, step.what)
		case 1:
			follow.check(t, c, step.what)
		}
		took, err := c.NewServiceAnswers(n1, fmt.Sprintf("%s-new-%d", name, i), newServiceLimit)
		if err != nil {
			t.Errorf("%s: a Service created after the start does not answer within %v: %v", step.what, newServiceLimit, err)
		} else {
			t.Logf("%s: a new Service answered %v after its EndpointSlice", step.what, took.Round(time.Millisecond))
		}
	}
	time.Sleep(2 * time.Second)
	for what, l := range loads {
		noFailures(t, what+" across two downgrades and two upgrades", l.Stop(), 100)
	}
	// The node follows the API after the last upgrade.
	c.SetEndpoints(svc, F.EP{Pod: a})
	c.Expect("ext", F.TCP(n1.IP, np), converge, F.AllOf(a.Name))
}

// removeTCBefore is the operator's step before a rollback to a version
// without the tc programs: node 1 restarts once without
// --bpf-tc-interfaces, which drains the programs and takes them off.
func removeTCBefore(t *testing.T, c *F.Cluster, n *F.Node, what string) {
	t.Helper()
	n.NoTC = true
	defer func() { n.NoTC = false }()
	t0 := time.Now()
	changeImage(t, c, n, "before the "+what+": this svcproxy without --bpf-tc-interfaces", "")
	for c.TCAttached(n, "eth0") {
		if time.Since(t0) > tcDrainLimit {
			t.Fatalf("before the %s: the tc programs still on node 1's eth0 %v after a start without --bpf-tc-interfaces", what, tcDrainLimit)
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Logf("before the %s: the tc programs off node 1's eth0 %v after the stop", what, time.Since(t0).Round(time.Millisecond))
}

// followed is what node 1 must follow while it runs another svcproxy: a
// node port one of whose two endpoints goes, and one whose Service is
// deleted.
type followed struct {
	n               *F.Node
	svc, gone       *corev1.Service
	np, goneNP      int32
	stays           F.EP
	staysPod, goPod string
}

// newFollowed creates both Services and waits until node 1's node ports
// serve them from outside.
func newFollowed(t *testing.T, c *F.Cluster, n *F.Node, name string, stays, leaves F.EP) *followed {
	t.Helper()
	f := &followed{n: n, stays: stays, staysPod: stays.Pod.Name, goPod: leaves.Pod.Name}
	f.svc = c.CreateService(F.NewService(name+"-follow", corev1.ServiceTypeNodePort))
	c.SetEndpoints(f.svc, stays, leaves)
	f.gone = c.CreateService(F.NewService(name+"-gone", corev1.ServiceTypeNodePort))
	c.SetEndpoints(f.gone, stays)
	_, f.np = port(f.svc, corev1.ProtocolTCP)
	_, f.goneNP = port(f.gone, corev1.ProtocolTCP)
	c.Expect("ext", F.TCP(n.IP, f.np), converge, F.AllOf(f.staysPod, f.goPod))
	c.Expect("ext", F.TCP(n.IP, f.goneNP), converge, F.AllOf(f.staysPod))
	return f
}

// change removes an endpoint and deletes a Service, and checks that node
// 1 follows.
func (f *followed) change(t *testing.T, c *F.Cluster, what string) {
	t.Helper()
	c.SetEndpoints(f.svc, f.stays)
	c.DeleteService(f.gone.Name)
	f.check(t, c, what)
}

// check: within converge, only the endpoint that stays answers through
// node 1, and the deleted Service's node port no longer does.
func (f *followed) check(t *testing.T, c *F.Cluster, what string) {
	t.Helper()
	t0 := time.Now()
	if err := c.Eventually("ext", F.TCP(f.n.IP, f.np), 10, converge, F.OnlyBy(f.staysPod)); err != nil {
		t.Errorf("%s: node 1 still sends to the endpoint removed: %v", what, err)
	}
	if err := c.Eventually("ext", F.TCP(f.n.IP, f.goneNP), 10, converge, F.Failing("")); err != nil {
		t.Errorf("%s: node 1 still answers the deleted Service's node port: %v", what, err)
	}
	t.Logf("%s: node 1 followed the changes in %v", what, time.Since(t0).Round(time.Millisecond))
}

// syncFailures are the series that count a failed sync, per mode; in
// nftables mode also the failed deletions of what the other version left.
// ebpf mode counts either half's failures in a series of its own.
var syncFailures = map[string][]string{
	"nftables": {"kubeproxy_sync_proxy_rules_nftables_sync_failures_total", "kubeproxy_sync_proxy_rules_nftables_cleanup_failures_total"},
	"iptables": {"kubeproxy_sync_proxy_rules_iptables_restore_failures_total"},
	"ebpf":     {"svcproxy_ebpf_sync_failures_total", "kubeproxy_sync_proxy_rules_nftables_cleanup_failures_total"},
}

// changeImage restarts n's proxy with bin (this build when empty), waits
// until both families have synced, and fails if a sync of the new process
// failed.
func changeImage(t *testing.T, c *F.Cluster, n *F.Node, what, bin string) {
	t.Helper()
	t0 := time.Now()
	n.Proxy.Stop(10 * time.Second)
	n.Bin = bin
	if err := c.StartProxy(n); err != nil {
		t.Fatal(err)
	}
	waitBothFamiliesSynced(t, c, n)
	t.Logf("%s: both families synced %v after the stop", what, time.Since(t0).Round(time.Millisecond))
	text, err := c.Metrics(n)
	if err != nil {
		t.Fatal(err)
	}
	for _, series := range syncFailures[c.Opts.Mode] {
		for _, fam := range []string{"IPv4", "IPv6"} {
			if v := sample(text, series+`{ip_family="`+fam+`"}`); v > 0 {
				t.Errorf("%s: %s{ip_family=%q} is %v", what, series, fam, v)
			}
		}
	}
}
