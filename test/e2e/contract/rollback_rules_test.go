package contract

import (
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"

	F "github.com/svcproxy/svcproxy/test/e2e/framework"
)

// rollbackMode is what the rollback tests do differently per mode.
type rollbackMode struct {
	name string
	// failures is the metric that counts a proxy's failed syncs.
	failures string
	// cleanupFailures, if set, counts svcproxy's failed deletions of
	// what it does not render (upstream's objects, taken over): each
	// costs a recovery sync.
	cleanupFailures string
	// failed matches a line of upstream's log that says a sync failed.
	failed *regexp.Regexp
	// onlyUpstream fails for anything on n that upstream's sync does not
	// own: upstream only rewrites what it knows by name, so whatever else
	// svcproxy left would keep acting on packets, or be dead weight.
	onlyUpstream func(t *testing.T, c *F.Cluster, n *F.Node, what string)
	// wipe removes every rule of the mode from n: a clean start.
	wipe func(t *testing.T, c *F.Cluster, n *F.Node, up upstreamKubeProxy)
}

var nftablesRollback = rollbackMode{
	name:            "nftables",
	failures:        "kubeproxy_sync_proxy_rules_nftables_sync_failures_total",
	cleanupFailures: "kubeproxy_sync_proxy_rules_nftables_cleanup_failures_total",
	failed:          regexp.MustCompile(`(?i)sync failed`),
	onlyUpstream:    expectOnlyUpstreamBaseChains,
	wipe: func(t *testing.T, c *F.Cluster, n *F.Node, _ upstreamKubeProxy) {
		t.Helper()
		for _, fam := range []string{"ip", "ip6"} {
			if out, err := c.Exec(n, "nft", "delete", "table", fam, "kube-proxy"); err != nil {
				t.Fatalf("nft delete table %s kube-proxy: %v: %s", fam, err, out)
			}
		}
	},
}

var iptablesRollback = rollbackMode{
	name:         "iptables",
	failures:     "kubeproxy_sync_proxy_rules_iptables_restore_failures_total",
	failed:       regexp.MustCompile(`Failed to execute iptables-restore|Failed to ensure chain`),
	onlyUpstream: expectOnlyUpstreamChains,
	// What an operator runs to start over: upstream's own cleanup.
	wipe: func(t *testing.T, c *F.Cluster, n *F.Node, up upstreamKubeProxy) {
		t.Helper()
		if out, err := c.Exec(n, up.bin, "--cleanup"); err != nil {
			t.Fatalf("kube-proxy --cleanup: %v: %s", err, out)
		}
	},
}

// upstreamBaseChains are upstream's nftables base chains (v1.35 to v1.37:
// same names, hooks and priorities): type, hook, priority.
var upstreamBaseChains = map[string]string{
	"filter-prerouting-pre-dnat": "filter prerouting -110",
	"filter-output-pre-dnat":     "filter output -110",
	"filter-input":               "filter input 0",
	"filter-forward":             "filter forward 0",
	"filter-output":              "filter output 0",
	"nat-prerouting":             "nat prerouting -100",
	"nat-output":                 "nat output -100",
	"nat-postrouting":            "nat postrouting 100",
}

// expectOnlyUpstreamBaseChains fails for any base chain of the kube-proxy
// tables on n that is not one of upstream's, as upstream defines it: its
// first sync re-creates its own base chains by name and touches no other,
// so any other would keep steering packets into chains nobody maintains.
func expectOnlyUpstreamBaseChains(t *testing.T, c *F.Cluster, n *F.Node, what string) {
	t.Helper()
	out, err := c.Exec(n, "nft", "-j", "list", "chains")
	if err != nil {
		t.Fatalf("nft list chains: %v: %s", err, out)
	}
	var listing struct {
		Nftables []struct {
			Chain *struct {
				Family, Table, Name, Type, Hook string
				Prio                            int
			}
		}
	}
	if err := json.Unmarshal([]byte(out), &listing); err != nil {
		t.Fatalf("nft -j list chains: %v", err)
	}
	hooked := 0
	for _, o := range listing.Nftables {
		ch := o.Chain
		if ch == nil || ch.Table != "kube-proxy" || ch.Hook == "" {
			continue
		}
		hooked++
		got := fmt.Sprintf("%s %s %d", ch.Type, ch.Hook, ch.Prio)
		if want, ok := upstreamBaseChains[ch.Name]; !ok || got != want {
			t.Errorf("%s: %s kube-proxy: base chain %s (%s) is not upstream's (want %q): left hooked after the switch",
				what, ch.Family, ch.Name, got, want)
		}
	}
	if want := 2 * len(upstreamBaseChains); hooked != want {
		t.Errorf("%s: %d base chains in the kube-proxy tables, want upstream's %d", what, hooked, want)
	}
}

// upstreamJumps are the rules upstream's iptables mode (v1.35 to v1.37)
// keeps in the built-in chains, as "table chain target": its
// iptablesJumpChains and the duplicates of kubelet's KUBE-FIREWALL jumps.
var upstreamJumps = []string{
	"filter INPUT KUBE-EXTERNAL-SERVICES", "filter FORWARD KUBE-EXTERNAL-SERVICES",
	"filter INPUT KUBE-NODEPORTS", "filter FORWARD KUBE-SERVICES", "filter OUTPUT KUBE-SERVICES",
	"filter FORWARD KUBE-FORWARD", "filter INPUT KUBE-PROXY-FIREWALL", "filter OUTPUT KUBE-PROXY-FIREWALL",
	"filter FORWARD KUBE-PROXY-FIREWALL", "nat OUTPUT KUBE-SERVICES", "nat PREROUTING KUBE-SERVICES",
	"nat POSTROUTING KUBE-POSTROUTING", "filter INPUT KUBE-FIREWALL", "filter OUTPUT KUBE-FIREWALL",
}

// upstreamTopChains are the chains upstream's iptables mode writes whatever
// the Services, per table.
var upstreamTopChains = map[string][]string{
	"filter": {"KUBE-SERVICES", "KUBE-EXTERNAL-SERVICES", "KUBE-FORWARD", "KUBE-NODEPORTS",
		"KUBE-PROXY-FIREWALL", "KUBE-FIREWALL", "KUBE-PROXY-CANARY"},
	"nat":    {"KUBE-SERVICES", "KUBE-NODEPORTS", "KUBE-POSTROUTING", "KUBE-MARK-MASQ", "KUBE-PROXY-CANARY"},
	"mangle": {"KUBE-PROXY-CANARY"},
}

// upstreamServiceChain matches upstream's per-service and per-endpoint
// chains; its full sync deletes those of them it did not write.
var upstreamServiceChain = regexp.MustCompile(`^KUBE-(SVC|SVL|EXT|FW|SEP)-[A-Z2-7]{16}$`)

// expectOnlyUpstreamChains fails, in each family, for a rule in a built-in
// chain that jumps to a KUBE-* chain other than upstream's own jumps (or
// one of them twice, or missing), and for a KUBE-* chain that is neither one
// of upstream's fixed chains nor a service chain some rule jumps to: upstream
// writes only what it knows by name, so anything else would be svcproxy's,
// left behind.
func expectOnlyUpstreamChains(t *testing.T, c *F.Cluster, n *F.Node, what string) {
	t.Helper()
	for _, save := range []string{"iptables-save", "ip6tables-save"} {
		out, err := c.Exec(n, save)
		if err != nil {
			t.Fatalf("%s: %v: %s", save, err, out)
		}
		problems := iptablesLeftovers(parseIPTablesSave(out))
		for _, p := range problems {
			t.Errorf("%s: %s: %s", what, save, p)
		}
		if len(problems) > 0 {
			t.Logf("%s: %s:\n%s", what, save, out)
		}
	}
}

// iptablesDump is what expectOnlyUpstreamChains reads from iptables-save:
// per table, its chains and each rule's chain and target.
type iptablesDump map[string]*iptablesTable

type iptablesTable struct {
	builtin map[string]bool // built-in chains (with a policy)
	chains  []string        // every chain, in the order listed
	jumps   [][2]string     // chain, target (-j or -g) of each rule
}

var ruleTarget = regexp.MustCompile(`^-A (\S+) .*-[jg] (\S+)`)

func parseIPTablesSave(out string) iptablesDump {
	d := iptablesDump{}
	var cur *iptablesTable
	for _, l := range strings.Split(out, "\n") {
		switch {
		case strings.HasPrefix(l, "*"):
			cur = &iptablesTable{builtin: map[string]bool{}}
			d[l[1:]] = cur
		case cur == nil:
		case strings.HasPrefix(l, ":"):
			f := strings.Fields(l[1:])
			cur.chains = append(cur.chains, f[0])
			cur.builtin[f[0]] = len(f) > 1 && f[1] != "-"
		default:
			if m := ruleTarget.FindStringSubmatch(l); m != nil {
				cur.jumps = append(cur.jumps, [2]string{m[1], m[2]})
			}
		}
	}
	return d
}

// iptablesLeftovers lists what in d upstream would not have written.
func iptablesLeftovers(d iptablesDump) []string {
	var problems []string
	jumps := map[string]int{}
	for table, tb := range d {
		targets := map[string]bool{}
		for _, j := range tb.jumps {
			targets[j[1]] = true
			if tb.builtin[j[0]] && strings.HasPrefix(j[1], "KUBE-") {
				jumps[table+" "+j[0]+" "+j[1]]++
			}
		}
		for _, ch := range tb.chains {
			if tb.builtin[ch] || !strings.HasPrefix(ch, "KUBE-") || slices.Contains(upstreamTopChains[table], ch) {
				continue
			}
			if table != "nat" || !upstreamServiceChain.MatchString(ch) {
				problems = append(problems, fmt.Sprintf("table %s: chain %s is none of upstream's", table, ch))
			} else if !targets[ch] {
				problems = append(problems, fmt.Sprintf("table %s: chain %s is left unreferenced", table, ch))
			}
		}
	}
	for _, j := range upstreamJumps {
		if jumps[j] != 1 {
			problems = append(problems, fmt.Sprintf("jump %q: %d rules, want upstream's one", j, jumps[j]))
		}
		delete(jumps, j)
	}
	for j := range jumps {
		problems = append(problems, fmt.Sprintf("jump %q is not upstream's", j))
	}
	sort.Strings(problems)
	return problems
}
