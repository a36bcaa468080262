package dataplane

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	F "github.com/svcproxy/svcproxy/test/e2e/framework"
)

// otherMode is the mode a node of mode switches to and back from.
func otherMode(mode string) string {
	if mode == "nftables" {
		return "iptables"
	}
	return "nftables"
}

// testModeSwitchUnderLoad switches node 1 to the other mode and back, as
// an operator's ConfigMap edit and DaemonSet rollout do (the old process
// stopped by SIGTERM, the new one started in the other mode), while pods
// and an outside client keep connecting through it in both families and
// over UDP: not one connection may fail. The new mode's rules must be
// live before the old mode's are removed, and the old mode's must be gone
// once the new one has synced.
func testModeSwitchUnderLoad(t *testing.T, c *F.Cluster) {
	n1, n2 := c.Nodes[0], c.Nodes[1]
	a, b := c.AddPod(n1, "msa"), c.AddPod(n2, "msb")
	svc, v4, v6 := dualStackNodePort(t, c, "modeswitch", F.EP{Pod: a}, F.EP{Pod: b})
	_, np := port(svc, corev1.ProtocolTCP)
	loads := startLoads(t, c, throughNode(n1, v4, v6, np), "msa", "msb")
	from := c.Opts.Mode
	for _, to := range []string{otherMode(from), from} {
		switchMode(t, c, n1, from, to)
		from = to
	}
	time.Sleep(2 * time.Second)
	for what, l := range loads {
		noFailures(t, what+" across two mode switches", l.Stop(), 100)
	}
	// The node follows the API in the mode it switched back to.
	c.SetEndpoints(svc, F.EP{Pod: a})
	c.Expect("ext", F.TCP(n1.IP, np), converge, F.AllOf("msa"))
}

// switchMode restarts n's proxy in mode to, waits until both families have
// synced and then until mode from's rules are gone.
func switchMode(t *testing.T, c *F.Cluster, n *F.Node, from, to string) {
	t.Helper()
	t0 := time.Now()
	n.Proxy.Stop(10 * time.Second)
	if err := c.SwitchMode(n, to); err != nil {
		t.Fatal(err)
	}
	if err := c.StartProxy(n); err != nil {
		t.Fatal(err)
	}
	waitBothFamiliesSynced(t, c, n)
	synced := time.Since(t0)
	deadline := time.Now().Add(converge)
	if to == "ebpf" && from == "nftables" && c.TCServes(n) {
		// With the tc programs, ebpf mode keeps of nftables mode's
		// tables only what keeps the translation of the connections its
		// rules made (F.KeptTable).
		noRules(t, c, from+" → "+to)
		t.Logf("%s → %s: both families synced %v after the stop; %s's rules gone %v after it",
			from, to, synced.Round(time.Millisecond), from, time.Since(t0).Round(time.Millisecond))
		return
	}
	if to == "ebpf" && from == "nftables" {
		// ebpf mode keeps nftables mode's table: its packet path.
		t.Logf("%s → %s: both families synced %v after the stop; %s's table stays", from, to, synced.Round(time.Millisecond), from)
		return
	}
	for left := modeLeftovers(t, c, n, from); left != ""; left = modeLeftovers(t, c, n, from) {
		if time.Now().After(deadline) {
			t.Fatalf("%s → %s: %s's rules still there %v after the switch: %s", from, to, from, converge, left)
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Logf("%s → %s: both families synced %v after the stop, %s's rules gone %v after it",
		from, to, synced.Round(time.Millisecond), from, time.Since(t0).Round(time.Millisecond))
}

// modeLeftovers returns what mode left in n's kernel ("" when nothing):
// the nftables tables, ebpf mode's pins, or the iptables chains of either
// family.
func modeLeftovers(t *testing.T, c *F.Cluster, n *F.Node, mode string) string {
	t.Helper()
	if mode == "ebpf" {
		return c.EBPFPinsLeft(n)
	}
	if mode == "nftables" {
		out, err := c.Exec(n, "nft", "list", "tables")
		if err != nil {
			t.Fatalf("nft list tables: %v: %s", err, out)
		}
		if strings.Contains(out, "kube-proxy") {
			return out
		}
		return ""
	}
	for _, save := range []string{"iptables-save", "ip6tables-save"} {
		out, err := c.Exec(n, save, "-t", "nat")
		if err != nil {
			t.Fatalf("%s: %v: %s", save, err, out)
		}
		if strings.Contains(out, ":KUBE-SERVICES") {
			return save + " still lists KUBE-SERVICES"
		}
	}
	return ""
}
