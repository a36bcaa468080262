package iptables_test

import (
	"context"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/svcproxy/svcproxy/pkg/kiptables"
	"github.com/svcproxy/svcproxy/pkg/pipeline/backends/iptables"
	"github.com/svcproxy/svcproxy/pkg/pipeline/desired"
	"github.com/svcproxy/svcproxy/pkg/proxy"
	"github.com/svcproxy/svcproxy/pkg/testing/netnstest"
	"github.com/svcproxy/svcproxy/pkg/testing/netnstest/scenario"
	"github.com/svcproxy/svcproxy/pkg/testing/proxytest"
)

// Both flavours Debian's iptables package ships; a node runs one of them,
// and the backend must work on either.
var flavours = []kiptables.Flavour{kiptables.FlavourNFT, kiptables.FlavourLegacy}

// Every table the backend writes (mangle holds only the canary).
var tables = []kiptables.Table{kiptables.TableMangle, kiptables.TableNAT, kiptables.TableFilter}

// requireKernel fails (never skips): these are the only tests that prove the
// rules work in a real kernel, so their absence must be loud.
func requireKernel(t *testing.T) {
	t.Helper()
	var tools []string
	for _, fl := range flavours {
		for _, f := range proxy.Families {
			for _, suffix := range []string{"", "-save", "-restore"} {
				tools = append(tools, tool(f, fl)+suffix)
			}
		}
	}
	netnstest.RequireKernel(t, tools...)
}

// tool is "iptables-nft", "ip6tables-legacy", ...
func tool(f proxy.IPFamily, fl kiptables.Flavour) string {
	if f == proxy.IPv6 {
		return "ip6tables-" + string(fl)
	}
	return "iptables-" + string(fl)
}

// kernel is one flavour's run: a fresh scenario cluster whose node1 is
// programmed by one iptables Proxier per family.
type kernel struct {
	env      *scenario.Env
	flavour  kiptables.Flavour
	proxiers map[proxy.IPFamily]*iptables.Proxier
	worlds   map[proxy.IPFamily]*scenario.World
}

// TestKernel programs both families into a real node namespace with each
// iptables flavour and sends real TCP, UDP and SCTP traffic through it.
func TestKernel(t *testing.T) {
	requireKernel(t)
	for _, fl := range flavours {
		t.Run(string(fl), func(t *testing.T) { testFlavour(t, fl) })
	}
}

func testFlavour(t *testing.T, fl kiptables.Flavour) {
	k := &kernel{env: scenario.NewEnv(t), flavour: fl,
		proxiers: map[proxy.IPFamily]*iptables.Proxier{}, worlds: map[proxy.IPFamily]*scenario.World{}}
	for _, f := range scenario.Families {
		k.worlds[f.Family] = k.env.NewWorld(f)
		k.proxiers[f.Family] = k.newProxier(t, f.Family)
		// The hostile Services go in with the others: none may stop the sync.
		k.sync(t, k.proxiers[f.Family], k.worlds[f.Family].Apply(t, append(k.env.Services(), k.env.HostileServices()...)...))
	}
	t.Run("RulesLiveInThisFlavourOnly", k.rulesInThisFlavourOnly)
	for _, f := range scenario.Families {
		t.Run(string(f.Family), func(t *testing.T) {
			k.env.TrafficCases(t, f)
			t.Run("Hostile", func(t *testing.T) { k.env.HostileCases(t, f) })
			k.env.EndpointRemoved(t, f, k.worlds[f.Family], func(t *testing.T, st *desired.State) {
				k.sync(t, k.proxiers[f.Family], st)
			})
			t.Run("RestartRewritesNothing", func(t *testing.T) { k.restart(t, f) })
		})
	}
	t.Run("CanaryRestoresFlushedRules", k.canaryRestores)
	t.Run("Cleanup", k.cleanup)
}

// newProxier creates a Proxier inside the node namespace, as the daemon
// would on the node.
func (k *kernel) newProxier(t *testing.T, f proxy.IPFamily) *iptables.Proxier {
	t.Helper()
	var p *iptables.Proxier
	err := k.env.Node1.NS.Do(func() (err error) {
		opts := iptables.Options{Flavour: k.flavour, SyncPeriod: 30 * time.Second}
		if p, err = iptables.New(context.Background(), f, opts); err != nil {
			return err
		}
		return p.Init(context.Background())
	})
	if err != nil {
		t.Fatalf("%s %s proxier: %v", k.flavour, f, err)
	}
	return p
}

// sync runs Sync inside the node namespace: the backend execs
// iptables-restore, which inherits the calling thread's namespace.
func (k *kernel) sync(t *testing.T, p *iptables.Proxier, st *desired.State) {
	t.Helper()
	if err := k.env.Node1.NS.Do(func() error { return p.Sync(context.Background(), st, proxytest.ModeOf(st)) }); err != nil {
		t.Fatalf("sync: %v", err)
	}
}

// rulesInThisFlavourOnly proves the test exercises the flavour it names:
// the rules are visible to this flavour's tools and not the other's.
func (k *kernel) rulesInThisFlavourOnly(t *testing.T) {
	other := kiptables.FlavourLegacy
	if k.flavour == other {
		other = kiptables.FlavourNFT
	}
	for _, f := range proxy.Families {
		if mine := save(t, k.env.Node1.NS, f, k.flavour); !strings.Contains(mine, "-j KUBE-SERVICES") {
			t.Errorf("%s-save shows no jump to KUBE-SERVICES:\n%s", tool(f, k.flavour), mine)
		}
		if theirs := save(t, k.env.Node1.NS, f, other); strings.Contains(theirs, "KUBE-") {
			t.Errorf("%s-save shows our chains too:\n%s", tool(f, other), theirs)
		}
	}
}

// restart: a new Proxier given the same State (a full sync) must leave the
// rules exactly as they were, and an established connection working. A
// service chain pair left by an earlier run (added behind the backend's
// back) must be swept (legacy: from the iptables-save that checked the
// jumps; nft: from its own listing of the chain names).
func (k *kernel) restart(t *testing.T, f scenario.Fam) {
	before := save(t, k.env.Node1.NS, f.Family, k.flavour)
	k.addStaleChains(t, f.Family)
	k.env.KeepsConnection(t, f, func() {
		full := *k.worlds[f.Family].State()
		full.Changed = nil
		p := k.newProxier(t, f.Family)
		k.sync(t, p, &full)
		k.proxiers[f.Family] = p
	})
	if after := save(t, k.env.Node1.NS, f.Family, k.flavour); after != before {
		t.Errorf("rules changed across restart:\n%s", diffLines(before, after))
	}
}

// addStaleChains adds KUBE-SVC-/KUBE-SEP-STALE0000000000, the first
// jumping to the second, as a run that knew another Service would have.
func (k *kernel) addStaleChains(t *testing.T, f proxy.IPFamily) {
	t.Helper()
	const in = "*nat\n:KUBE-SVC-STALE0000000000 - [0:0]\n:KUBE-SEP-STALE0000000000 - [0:0]\n" +
		"-A KUBE-SVC-STALE0000000000 -j KUBE-SEP-STALE0000000000\nCOMMIT\n"
	err := k.env.Node1.NS.Do(func() error {
		ipt, err := kiptables.New(f, k.flavour)
		if err != nil {
			return err
		}
		return ipt.Restore(context.Background(), []byte(in))
	})
	if err != nil {
		t.Fatalf("adding stale chains: %v", err)
	}
	if got := save(t, k.env.Node1.NS, f, k.flavour); !strings.Contains(got, "-A KUBE-SVC-STALE0000000000") {
		t.Fatalf("stale chains not added:\n%s", got)
	}
}

// kubeletOwned are the only KUBE-* lines cleanup leaves, by design (see
// cleanup.go and the contract §5.1): kubelet's KUBE-FIREWALL chain and its
// jumps, which we duplicate but must not delete.
var kubeletOwned = map[string]bool{
	":KUBE-FIREWALL - [0:0]":     true,
	"-A INPUT -j KUBE-FIREWALL":  true,
	"-A OUTPUT -j KUBE-FIREWALL": true,
}

// cleanup: after Cleanup no KUBE-* chain or rule is left in any table
// (besides kubelet's), and services no longer answer.
func (k *kernel) cleanup(t *testing.T) {
	for _, f := range proxy.Families {
		p := k.proxiers[f]
		if err := k.env.Node1.NS.Do(func() error { return p.Cleanup(context.Background()) }); err != nil {
			t.Fatalf("%s cleanup: %v", f, err)
		}
		for _, line := range strings.Split(save(t, k.env.Node1.NS, f, k.flavour), "\n") {
			if strings.Contains(line, "KUBE-") && !kubeletOwned[line] {
				t.Errorf("%s: left after Cleanup: %s", tool(f, k.flavour), line)
			}
		}
	}
	c := k.env.FromClient(scenario.Families[0])
	c.Timeout = scenario.DropTimeout
	if ans, err := c.Ask(proxy.TCP, scenarioClusterIP(scenario.Families[0])); err == nil {
		t.Errorf("cluster IP still answers after Cleanup: %v", ans)
	}
}

// counters are the packet/byte counts iptables-save prints; they change
// with traffic, not with rules.
var counters = regexp.MustCompile(`\[[0-9]+:[0-9]+\]`)

// save returns every table we write, as iptables-save prints them for one
// family and flavour, without comments and counters.
func save(t *testing.T, ns *netnstest.NS, f proxy.IPFamily, fl kiptables.Flavour) string {
	t.Helper()
	var b strings.Builder
	for _, table := range tables {
		out, err := ns.Run(context.Background(), tool(f, fl)+"-save", "-t", string(table))
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(string(out), "\n") {
			if line != "" && !strings.HasPrefix(line, "#") {
				b.WriteString(counters.ReplaceAllString(line, "[0:0]"))
				b.WriteByte('\n')
			}
		}
	}
	return b.String()
}

// diffLines shows the lines only in a or only in b (enough to see what moved).
func diffLines(a, b string) string {
	inA, inB := map[string]bool{}, map[string]bool{}
	for _, l := range strings.Split(a, "\n") {
		inA[l] = true
	}
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
	if len(out) == 0 {
		return "(same lines, different order)"
	}
	if len(out) > 20 {
		out = append(out[:20], fmt.Sprintf("... %d more", len(out)-20))
	}
	return strings.Join(out, "\n")
}
