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
// answers within 2 s of its EndpointSlice.
func testUpgradeAndDowngradeUnderLoad(t *testing.T, c *F.Cluster) {
	n1, n2 := c.Nodes[0], c.Nodes[1]
	a, b := c.AddPod(n1, "uga"), c.AddPod(n2, "ugb")
	svc, v4, v6 := dualStackNodePort(t, c, "upgrade", F.EP{Pod: a}, F.EP{Pod: b})
	_, np := port(svc, corev1.ProtocolTCP)
	previous := F.PreviousBinary(t, c.Opts.Mode)
	loads := startLoads(t, c, throughNode(n1, v4, v6, np), "uga", "ugb")
	t.Cleanup(func() { n1.Bin = "" })
	for i, step := range []struct{ what, bin string }{
		{"downgrade to the previous svcproxy", previous},
		{"upgrade to this svcproxy", ""},
		{"downgrade again", previous},
		{"upgrade again", ""},
	} {
		changeImage(t, c, n1, step.what, step.bin)
		took, err := c.NewServiceAnswers(n1, fmt.Sprintf("upgrade-new-%d", i), newServiceLimit)
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
	c.Expect("ext", F.TCP(n1.IP, np), converge, F.AllOf("uga"))
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
