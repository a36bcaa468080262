package backends

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"

	"sigs.k8s.io/knftables"

	"github.com/svcproxy/svcproxy/pkg/kconntrack"
	"github.com/svcproxy/svcproxy/pkg/knft"
	"github.com/svcproxy/svcproxy/pkg/pipeline/backends/nftables"
	"github.com/svcproxy/svcproxy/pkg/pipeline/desired"
	"github.com/svcproxy/svcproxy/pkg/proxy"
	"github.com/svcproxy/svcproxy/pkg/testing/netnstest/scenario"
)

// keptChains are the chains of a family's table a start with the tc
// programs keeps, so that connections an earlier start's or another
// mode's rules translated keep their translation (nftables.KeepNATHooks):
// the rules' nat base chains, empty, and a chain no packet enters, whose
// one rule needs conntrack.
var keptChains = []string{"keep-conntrack", "nat-output", "nat-postrouting", "nat-prerouting"}

// nftFamily is nft's name of family's tables.
func nftFamily(family proxy.IPFamily) string {
	if family == proxy.IPv6 {
		return "ip6"
	}
	return "ip"
}

// familyTable reports whether node1 has family's table kube-proxy ("ip
// kube-proxy", "ip6 kube-proxy") and what it holds beyond the kept chains
// and their one rule: every other chain, rule, set and map, by kind and
// name.
func familyTable(t *testing.T, env *scenario.Env, family proxy.IPFamily) (present bool, extra []string) {
	t.Helper()
	table := nftFamily(family) + " kube-proxy"
	out, err := env.Node1.NS.Run(context.Background(), "nft", "list", "tables")
	if err != nil {
		t.Fatalf("nft list tables: %v: %s", err, out)
	}
	if !slices.Contains(strings.Split(string(out), "\n"), "table "+table) {
		return false, nil
	}
	out, err = env.Node1.NS.Run(context.Background(), "nft", "--json", "list", "table", nftFamily(family), "kube-proxy")
	if err != nil {
		t.Fatalf("nft --json list table %s: %v: %s", table, err, out)
	}
	var listing struct {
		Nftables []map[string]struct {
			Name  string `json:"name"`
			Chain string `json:"chain"`
		} `json:"nftables"`
	}
	if err := json.Unmarshal(out, &listing); err != nil {
		t.Fatalf("nft --json list table %s: %v: %s", table, err, out)
	}
	rules := 0
	for _, obj := range listing.Nftables {
		for kind, o := range obj {
			switch {
			case kind == "metainfo" || kind == "table":
			case kind == "chain" && slices.Contains(keptChains, o.Name):
			case kind == "rule" && o.Chain == "keep-conntrack" && rules == 0:
				rules++
			case kind == "rule":
				extra = append(extra, fmt.Sprintf("rule in %s", o.Chain))
			default:
				extra = append(extra, kind+" "+o.Name)
			}
		}
	}
	return true, extra
}

// ipv4Rules reports whether node1's IPv4 table holds more than what
// nftables.KeepNATHooks keeps: the rules.
func ipv4Rules(t *testing.T, env *scenario.Env) bool { return familyRules(t, env, proxy.IPv4) }

// familyRules reports whether node1's table of family holds more than what
// nftables.KeepNATHooks keeps: the rules.
func familyRules(t *testing.T, env *scenario.Env, family proxy.IPFamily) bool {
	t.Helper()
	_, extra := familyTable(t, env, family)
	return len(extra) > 0
}

// noServiceRules checks that node1 holds no rules of svcproxy's in either
// family: no KUBE- chain in iptables-save or ip6tables-save but the
// kubelet's (which iptables mode creates where no kubelet did, and
// leaves), and in the tables "ip kube-proxy" and "ip6 kube-proxy" the
// kept chains and their one rule at most (they go with the last
// connection the rules translated, leaving the table empty).
func noServiceRules(t *testing.T, env *scenario.Env) {
	t.Helper()
	ctx := context.Background()
	for _, family := range proxy.Families {
		if present, extra := familyTable(t, env, family); !present || len(extra) > 0 {
			out, _ := env.Node1.NS.Run(ctx, "nft", "list", "table", nftFamily(family), "kube-proxy")
			t.Errorf("node1's table %s kube-proxy: present %t (want true), holding beyond the kept chains %v:\n%s",
				nftFamily(family), present, extra, out)
		}
	}
	for _, save := range []string{"iptables-save", "ip6tables-save"} {
		out, err := env.Node1.NS.Run(ctx, save)
		if err != nil {
			t.Fatalf("%s: %v: %s", save, err, out)
		}
		for _, line := range strings.Split(string(out), "\n") {
			if chain, ok := strings.CutPrefix(line, ":KUBE-"); ok && !strings.HasPrefix(chain, "FIREWALL ") && !strings.HasPrefix(chain, "KUBELET-CANARY ") {
				t.Errorf("node1 holds rules of svcproxy's in %s:\n%s", save, out)
				break
			}
		}
	}
}

// TestKernelKeptNATHooksGoWithTheirConnections: with the tc programs on,
// each family's kept chains stay while a connection nftables mode's rules
// translated is in the kernel's conntrack, and go at the first sync after
// the last one has, leaving the table empty: the kernel then tracks
// nothing for svcproxy, and the tc programs go on serving new connections
// without it. explain still tells that the tc programs serve.
func TestKernelKeptNATHooksGoWithTheirConnections(t *testing.T) {
	env, cfg, _ := tcModeEnv(t)
	ctx := context.Background()
	recheck := keptHooksRecheck
	keptHooksRecheck = 0
	t.Cleanup(func() { keptHooksRecheck = recheck })
	conns := dialThroughRules(t, env, nftablesBackend)

	withTC := openEBPFMode(t, env, cfg)
	t.Cleanup(func() { _ = env.Node1.NS.Do(func() error { return withTC.cleanup(ctx) }) })
	decide := func(o *desired.Options) { ebpfBackend.Decide(cfg, o) }
	syncAll(t, env, decide, withTC.sync)
	for _, family := range proxy.Families {
		if present, extra := familyTable(t, env, family); !present || len(extra) > 0 {
			t.Errorf("with the rules' connections open: node1's table %s kube-proxy present %t (want true), beyond the kept chains %v",
				nftFamily(family), present, extra)
		}
	}
	askAll(t, conns, "nftables → ebpf+tc, the rules' connections open")
	closeAll(conns)
	// A closed connection's flow lingers in conntrack (TIME_WAIT) until
	// its timeout: deleted here as the timeout would.
	for _, family := range proxy.Families {
		dnated, err := node1Flows(env, family == proxy.IPv6, kconntrack.Flow.DNATed)
		if err != nil || len(dnated) == 0 {
			t.Fatalf("%s: node1's conntrack holds %d translated flows (%v), want the rules' connections", family, len(dnated), err)
		}
		deleteNode1Flows(t, env, family, dnated)
	}
	syncAll(t, env, decide, withTC.sync)
	emptied(t, env, "no translated connection left")
	// A restart puts the kept chains back at its first sync and, with
	// nothing translated, empties the table again in the same step.
	restarted := openEBPFMode(t, env, cfg)
	syncAll(t, env, decide, restarted.sync)
	emptied(t, env, "after a restart")
	askAll(t, dialBoth(t, env, byTCFrom(env)), "the kept chains gone")
	noServiceRules(t, env)
}

// emptied checks that node1's tables of both families hold no chain and
// tell explain that the tc programs serve the family.
func emptied(t *testing.T, env *scenario.Env, when string) {
	t.Helper()
	for _, family := range proxy.Families {
		var chains []string
		var served bool
		err := env.Node1.NS.Do(func() (err error) {
			served = nftables.WithoutRules(family)
			chains, err = knft.ChainNames(knftables.Family(nftFamily(family)), "kube-proxy")
			return err
		})
		if err != nil || len(chains) > 0 || !served {
			t.Errorf("%s: node1's table %s kube-proxy has chains %v (%v), served without rules %t; want none, true",
				when, nftFamily(family), chains, err, served)
		}
	}
}

// deleteNode1Flows deletes flows from node1's conntrack.
func deleteNode1Flows(t *testing.T, env *scenario.Env, family proxy.IPFamily, flows []kconntrack.Flow) {
	t.Helper()
	ct, err := node1Conntrack(env)
	if err != nil {
		t.Fatal(err)
	}
	defer ct.Close()
	if _, err := ct.Delete(context.Background(), family, flows); err != nil {
		t.Fatal(err)
	}
}
