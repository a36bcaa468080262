package kiptables

import (
	"bytes"
	"slices"
	"strings"
	"testing"
)

// FuzzRestoreSaveRoundTrip: whatever restore input the Fake accepts, its
// iptables-save rendering parses back to the same tables
// (parse(render(x)) == x), and the parsers production runs on
// iptables-save output and restore input (SavedChainNames, savedChecks,
// cacheHinter) never panic and agree with the rendering.
func FuzzRestoreSaveRoundTrip(f *testing.F) {
	for _, seed := range []string{
		"*nat\n:KUBE-A - [0:0]\n-A KUBE-A -m comment --comment \"a b\" -j RETURN\nCOMMIT\n",
		"*filter\n:KUBE-FW - [0:0]\n:INPUT ACCEPT [0:0]\n-A INPUT -j KUBE-FW\n-A KUBE-FW -d 10.0.0.1/32 -p tcp -m tcp --dport 80 -j DROP\nCOMMIT\n",
		"*nat\n:KUBE-SVC-X - [0:0]\n:KUBE-SEP-Y - [0:0]\n-A KUBE-SVC-X -m statistic --mode random --probability 0.50000000000 -j KUBE-SEP-Y\n" +
			"-A KUBE-SEP-Y -p tcp -m tcp -j DNAT --to-destination 10.1.0.5:8080\nCOMMIT\n*mangle\n:KUBE-M - [0:0]\nCOMMIT\n",
		"*nat\n:KUBE-A - [0:0]\n-X KUBE-A\nCOMMIT\n",
		"# comment\n\n*mangle\n:PREROUTING ACCEPT [5:300]\nCOMMIT\n",
		"*nat\n-A NOPE -j RETURN\nCOMMIT\n",
		"*nat\n:KUBE-A - [0:0]\n-A KUBE-A -j \"unterminated\n",
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, data string) {
		if hinted, _ := hinted(t, []byte(data), 5); !bytes.Equal(bytes.Replace(hinted, listCmd, nil, -1), []byte(data)) && !bytes.Contains([]byte(data), listCmd) {
			t.Fatalf("the hinter changed more than the hint:\n%q\n%q", data, hinted)
		}
		_ = SavedChainNames([]byte(data))
		_, _ = parsePresent([]byte(data), []FrontRule{{Chain: "KUBE-A", Rule: SplitRule(data)}})

		x := NewFake()
		if err := x.Restore(ctx, []byte(data)); err != nil {
			return
		}
		for _, table := range []Table{TableFilter, TableNAT, TableMangle} {
			checkRoundTrip(t, x, table)
		}
	})
}

// checkRoundTrip renders table of x with Save, parses that into a new Fake
// and checks the result renders the same, and that the production parsers
// see in the rendering exactly the chains and rules x holds.
func checkRoundTrip(t *testing.T, x *Fake, table Table) {
	save, err := x.Save(ctx, table)
	if err != nil {
		t.Fatalf("save %s: %v", table, err)
	}
	y := NewFake()
	if err := y.Restore(ctx, save); err != nil {
		t.Fatalf("the rendering of %s does not parse: %v\n%s", table, err, save)
	}
	again, _ := y.Save(ctx, table)
	if string(again) != string(save) {
		t.Fatalf("parse(render(x)) != x for %s:\n%s\nvs\n%s", table, save, again)
	}
	want := x.Table(table)
	if got := SavedChainNames(save); !slices.Equal(got, want.chainNames()) {
		t.Fatalf("SavedChainNames = %q, want %q", got, want.chainNames())
	}
	var rules []FrontRule
	for _, c := range want.Chains {
		for _, r := range c.Rules {
			if words := SplitRule(r); JoinArgs(words) == r {
				rules = append(rules, FrontRule{Chain: c.Name, Rule: words})
			}
		}
	}
	names, have := parsePresent(save, rules)
	if !slices.Equal(names, SavedChainNames(save)) {
		t.Fatalf("parsePresent names = %q, SavedChainNames %q", names, SavedChainNames(save))
	}
	for name := range want.Chains {
		if !have.chains[name] {
			t.Fatalf("parsePresent misses chain %q in\n%s", name, save)
		}
	}
	for _, r := range rules {
		if !have.rules[r.line()] {
			t.Fatalf("parsePresent misses rule %q in chain %q in\n%s", strings.Join(r.Rule, " "), r.Chain, save)
		}
	}
}
