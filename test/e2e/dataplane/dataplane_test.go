// Package dataplane is svcproxy's end-to-end suite: for each mode that can
// run on this kernel (nftables, iptables, ebpf; IPVS needs a VM, see make
// test-ipvs) it builds a cluster of network namespaces around a real
// kube-apiserver (test/e2e/framework) and drives every scenario through the
// API, checking real TCP and UDP traffic from pods and from outside.
//
// Scenarios of one mode share one cluster and run in order; each uses its
// own Services and pods, so a failing one leaves the next ones meaningful.
// The faults that restart or delete parts of the cluster run last.
package dataplane

import (
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	F "github.com/svcproxy/svcproxy/test/e2e/framework"
)

// converge bounds how long a change made through the API may take to show
// in the dataplane: informer delivery + minSyncPeriod (1s) + a sync, with
// room for a loaded 2-core machine.
const converge = 20 * time.Second

type scenario struct {
	name string
	run  func(t *testing.T, c *F.Cluster)
}

// scenarios in the order they run; destructive faults come last.
var scenarios = []scenario{
	{"ClusterIPNodePortExternalLB", testFrontends},
	{"UpdatesAndDeletes", testUpdatesAndDeletes},
	{"ScaleToZeroAndBack", testScaleToZero},
	{"DualStackService", testDualStack},
	{"ExternalTrafficPolicyLocal", testETPLocal},
	{"InternalTrafficPolicyLocal", testITPLocal},
	{"PreferCloseByZone", testPreferClose},
	{"SessionAffinity", testAffinity},
	{"IgnoredServiceLabels", testIgnoredLabels},
	{"Explain", testExplain},
	{"LocalhostNodePortMetric", testLocalhostNodePortMetric},
	{"RollingReplacement", testRollingReplacement},
	{"UDPFlowSurvivesPodReplacement", testUDPReplacement},
	{"UDPNodePortFlowFollowsReplacement", testUDPNodePortReplacement},
	{"MalformedEndpointSlice", testMalformedSlice},
	{"RulesDeletedByThirdParty", testRulesDeleted},
	{"ServiceCIDRs", testServiceCIDRs},
	{"RestartWritesNothing", testRestartWritesNothing},
	{"RestartUnderLoad", testRestartUnderLoad},
	{"RestartWithPoisonService", testRestartWithPoisonService},
	{"UpgradeAndDowngradeUnderLoad", testUpgradeAndDowngradeUnderLoad},
	{"ModeSwitchUnderLoad", testModeSwitchUnderLoad},
	{"APIServerOutage", testAPIServerOutage},
	{"HealthzNodeDraining", testHealthzDraining},
}

// modes: E2E_MODES narrows them (comma-separated), e.g. for a quick rerun.
func modes() []string {
	if m := os.Getenv("E2E_MODES"); m != "" {
		return strings.Split(m, ",")
	}
	return []string{"nftables", "iptables", "ebpf"}
}

func TestDataplane(t *testing.T) {
	for _, mode := range modes() {
		t.Run(mode, func(t *testing.T) { runScenarios(t, F.Options{Mode: mode}, mode, scenarios) })
		if mode == "ebpf" {
			t.Run("ebpf+tc", testWithTC)
			t.Run("ebpf+xdp", testWithXDP)
		}
	}
}

// tcScenarios are the scenarios with traffic from outside the nodes, the
// traffic ebpf mode's experimental tc programs serve.
var tcScenarios = []string{"ClusterIPNodePortExternalLB", "DualStackService", "ExternalTrafficPolicyLocal", "SessionAffinity",
	"RollingReplacement", "UDPNodePortFlowFollowsReplacement", "RestartUnderLoad", "UpgradeAndDowngradeUnderLoad",
	"ModeSwitchUnderLoad"}

// testWithTC runs those scenarios in ebpf mode with the tc programs on
// the nodes' interface (--bpf-tc-interfaces=eth0), each checking that they
// are attached and that the nodes hold no rules of svcproxy's. It
// runs wherever ebpf mode does.
func testWithTC(t *testing.T) {
	run := withoutRules(whenAttached(append(named(tcScenarios), tcOnly...), "tc programs", func(c *F.Cluster, n *F.Node) bool {
		return c.TCAttached(n, "eth0")
	}))
	runScenarios(t, F.Options{Mode: "ebpf", TCInterfaces: []string{"eth0"}}, "ebpf+tc", run)
}

// tcOnly are scenarios of the tc programs alone, run after tcScenarios
// with the tc programs (not with XDP: the earlier build the downgrade goes
// to predates XDP's handling of partial checksums, which the nodes' veths
// carry; and XDP passes direct server return's flows to tc).
var tcOnly = []scenario{
	{"DowngradeWithTCUnderLoad", testDowngradeWithTCUnderLoad},
	{"DSR", testDSR},
}

// withoutRules wraps each scenario so that, before and after it, every
// node whose tc programs serve both families (F.Cluster.TCServes) holds no
// nftables or iptables rules of svcproxy's in either family, once its
// svcproxy has synced: each family's first sync removes what an earlier
// start left of its table, all but what keeps the translation of the
// connections its rules made (F.KeptTable says what stays).
func withoutRules(run []scenario) []scenario {
	out := make([]scenario, len(run))
	for i, s := range run {
		out[i] = scenario{s.name, func(t *testing.T, c *F.Cluster) {
			noRules(t, c, "before the scenario")
			s.run(t, c)
			noRules(t, c, "after the scenario")
		}}
	}
	return out
}

// noRules waits up to converge until every node TCServes holds no rules
// of svcproxy's, and fails naming what stays.
func noRules(t *testing.T, c *F.Cluster, when string) {
	t.Helper()
	for _, n := range c.Nodes {
		deadline := time.Now().Add(converge)
		for c.TCServes(n) {
			left, err := c.RulesLeft(n)
			if err != nil {
				t.Fatal(err)
			}
			if left == "" {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s, %s: the tc programs serve both families, yet the node holds %s", when, n.Name, left)
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
}

// named returns the scenarios of names, in the suite's order.
func named(names []string) []scenario {
	var out []scenario
	for _, s := range scenarios {
		if slices.Contains(names, s.name) {
			out = append(out, s)
		}
	}
	return out
}

// whenAttached wraps each scenario so that it first waits until every
// node in ebpf mode running this tree's svcproxy has attached what
// attached checks (the first sync loads and attaches the programs), and
// fails naming what when it does not.
func whenAttached(run []scenario, what string, attached func(*F.Cluster, *F.Node) bool) []scenario {
	out := make([]scenario, len(run))
	for i, s := range run {
		out[i] = scenario{s.name, func(t *testing.T, c *F.Cluster) {
			for _, n := range c.Nodes {
				deadline := time.Now().Add(converge)
				for (n.Mode == "" || n.Mode == "ebpf") && n.Bin == "" && !attached(c, n) {
					if time.Now().After(deadline) {
						t.Fatalf("%s: no %s on eth0 %v after the scenario began", n.Name, what, converge)
					}
					time.Sleep(100 * time.Millisecond)
				}
			}
			s.run(t, c)
		}}
	}
	return out
}

// runScenarios runs scenarios in order on one cluster of opts, a new one
// after a scenario fails.
func runScenarios(t *testing.T, opts F.Options, mode string, scenarios []scenario) {
	var c *F.Cluster
	for _, s := range scenarios {
		if c == nil {
			c = F.New(t, opts)
		}
		t0 := time.Now()
		ok := t.Run(s.name, func(t *testing.T) {
			c.T = t // helpers fail the scenario, not the mode
			s.run(t, c)
		})
		c.T = t
		t.Logf("%s/%s took %v", mode, s.name, time.Since(t0).Round(time.Millisecond))
		if !ok {
			// A failed scenario may leave svcproxy retrying a sync that
			// cannot succeed; the next scenario gets a fresh cluster so
			// each result stands on its own.
			t.Logf("%s/%s failed; logs kept in %s/logs; next scenario on a new cluster", mode, s.name, c.Work)
			c.Close()
			c = nil
		}
	}
}
