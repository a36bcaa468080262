package backends

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/svcproxy/svcproxy/pkg/testing/netnstest/scenario"
)

// keptChains are the chains of the IPv4 table a start with the tc
// programs keeps, so that connections an earlier start's or another
// mode's rules translated keep their translation (nftables.KeepNATHooks):
// the rules' nat base chains, empty, and a chain no packet enters, whose
// one rule needs conntrack.
var keptChains = []string{"keep-conntrack", "nat-output", "nat-postrouting", "nat-prerouting"}

// ipv4Table reports whether node1 has the table "ip kube-proxy" and what
// it holds beyond the kept chains and their one rule: every other chain,
// rule, set and map, by kind and name.
func ipv4Table(t *testing.T, env *scenario.Env) (present bool, extra []string) {
	t.Helper()
	out, err := env.Node1.NS.Run(context.Background(), "nft", "list", "tables")
	if err != nil {
		t.Fatalf("nft list tables: %v: %s", err, out)
	}
	if !strings.Contains(string(out), "table ip kube-proxy") {
		return false, nil
	}
	out, err = env.Node1.NS.Run(context.Background(), "nft", "--json", "list", "table", "ip", "kube-proxy")
	if err != nil {
		t.Fatalf("nft --json list table ip kube-proxy: %v: %s", err, out)
	}
	var listing struct {
		Nftables []map[string]struct {
			Name  string `json:"name"`
			Chain string `json:"chain"`
		} `json:"nftables"`
	}
	if err := json.Unmarshal(out, &listing); err != nil {
		t.Fatalf("nft --json list table ip kube-proxy: %v: %s", err, out)
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
func ipv4Rules(t *testing.T, env *scenario.Env) bool {
	t.Helper()
	_, extra := ipv4Table(t, env)
	return len(extra) > 0
}

// noIPv4Rules checks that node1 holds no IPv4 rules of svcproxy's: no KUBE-
// chain in iptables-save but the kubelet's (which iptables mode creates
// where no kubelet did, and leaves), and in the table "ip kube-proxy" exactly the kept
// chains and their one rule.
func noIPv4Rules(t *testing.T, env *scenario.Env) {
	t.Helper()
	ctx := context.Background()
	present, extra := ipv4Table(t, env)
	if !present || len(extra) > 0 {
		out, _ := env.Node1.NS.Run(ctx, "nft", "list", "table", "ip", "kube-proxy")
		t.Errorf("node1's table ip kube-proxy: present %t (want true), holding beyond the kept chains %v:\n%s", present, extra, out)
	}
	out, err := env.Node1.NS.Run(ctx, "iptables-save")
	if err != nil {
		t.Fatalf("iptables-save: %v: %s", err, out)
	}
	for _, line := range strings.Split(string(out), "\n") {
		if chain, ok := strings.CutPrefix(line, ":KUBE-"); ok && !strings.HasPrefix(chain, "FIREWALL ") && !strings.HasPrefix(chain, "KUBELET-CANARY ") {
			t.Errorf("node1 holds iptables rules of svcproxy's:\n%s", out)
			break
		}
	}
}
