package kiptables

import (
	"context"
	"strings"
	"testing"
)

var ctx = context.Background()

func TestFakeRestoreNoflushSemantics(t *testing.T) {
	f := NewFake()
	must(t, f.Restore(ctx, []byte(`*nat
:KUBE-A - [0:0]
:KUBE-B - [0:0]
-A KUBE-A -m comment --comment "to b" -j KUBE-B
-A KUBE-B -j RETURN
COMMIT
`)))
	// A chain line flushes the chain; an untouched chain keeps its rules.
	must(t, f.Restore(ctx, []byte("*nat\n:KUBE-A - [0:0]\n-A KUBE-A -j RETURN\nCOMMIT\n")))
	nat := f.Table(TableNAT)
	if got := nat.Chains["KUBE-A"].Rules; len(got) != 1 || got[0] != "-j RETURN" {
		t.Errorf("KUBE-A after flush+append = %q", got)
	}
	if got := nat.Chains["KUBE-B"].Rules; len(got) != 1 {
		t.Errorf("KUBE-B should be untouched, has %q", got)
	}
	// -X deletes a flushed chain.
	must(t, f.Restore(ctx, []byte("*nat\n:KUBE-B - [0:0]\n-X KUBE-B\nCOMMIT\n")))
	if f.Table(TableNAT).Chains["KUBE-B"] != nil {
		t.Error("KUBE-B not deleted")
	}
}

func TestFakeRestoreRejectsWhatIptablesRejects(t *testing.T) {
	for name, input := range map[string]string{
		"jump to a missing chain":  "*nat\n:KUBE-A - [0:0]\n-A KUBE-A -j KUBE-NOPE\nCOMMIT\n",
		"jump to a later chain":    "*nat\n:KUBE-A - [0:0]\n-A KUBE-A -j KUBE-B\n:KUBE-B - [0:0]\nCOMMIT\n",
		"append to missing chain":  "*nat\n-A KUBE-NOPE -j RETURN\nCOMMIT\n",
		"delete non-empty chain":   "*nat\n:KUBE-A - [0:0]\n-A KUBE-A -j RETURN\n-X KUBE-A\nCOMMIT\n",
		"delete referenced chain":  "*nat\n:KUBE-A - [0:0]\n:KUBE-B - [0:0]\n-A KUBE-A -j KUBE-B\n-X KUBE-B\nCOMMIT\n",
		"missing COMMIT":           "*nat\n:KUBE-A - [0:0]\n",
		"unknown table":            "*raw2\nCOMMIT\n",
		"delete a built-in chain":  "*nat\n-X PREROUTING\nCOMMIT\n",
		"rule outside of a table":  "-A PREROUTING -j RETURN\n",
		"unsupported command (-R)": "*nat\n-R PREROUTING 1 -j RETURN\nCOMMIT\n",
		"-I with a rule number":    "*nat\n-I PREROUTING 1 -j RETURN\nCOMMIT\n",
	} {
		f := NewFake()
		before := f.Dump()
		if err := f.Restore(ctx, []byte(input)); err == nil {
			t.Errorf("%s: accepted", name)
		}
		if f.Dump() != before {
			t.Errorf("%s: a failed section changed the table", name)
		}
	}
}

// TestFakeRestorePerTableAtomicity: a failing nat section leaves the
// already committed filter section applied, as iptables-restore does.
func TestFakeRestorePerTableAtomicity(t *testing.T) {
	f := NewFake()
	err := f.Restore(ctx, []byte("*filter\n:KUBE-F - [0:0]\nCOMMIT\n*nat\n-A KUBE-NOPE -j RETURN\nCOMMIT\n"))
	if err == nil {
		t.Fatal("accepted")
	}
	if f.Table(TableFilter).Chains["KUBE-F"] == nil {
		t.Error("committed filter section was rolled back")
	}
}

func TestFakeRuleOperations(t *testing.T) {
	f := NewFake()
	must(t, f.EnsureChain(ctx, TableNAT, "KUBE-S"))
	rule := []string{"-m", "comment", "--comment", "kubernetes service portals", "-j", "KUBE-S"}
	must(t, f.EnsureRuleAtFront(ctx, TableNAT, ChainPrerouting, "-j", "RETURN"))
	must(t, f.EnsureRuleAtFront(ctx, TableNAT, ChainPrerouting, rule...))
	must(t, f.EnsureRuleAtFront(ctx, TableNAT, ChainPrerouting, rule...)) // no duplicate
	got := f.Table(TableNAT).Chains[ChainPrerouting].Rules
	if strings.Join(got, "|") != `-m comment --comment "kubernetes service portals" -j KUBE-S|-j RETURN` {
		t.Errorf("PREROUTING = %q", got)
	}
	must(t, f.DeleteRule(ctx, TableNAT, ChainPrerouting, rule...))
	must(t, f.DeleteRule(ctx, TableNAT, ChainPrerouting, rule...)) // already gone: no error
	must(t, f.DeleteRule(ctx, TableNAT, "KUBE-NOPE", rule...))     // missing chain: no error
	if ok, _ := f.ChainExists(ctx, TableNAT, "KUBE-S"); !ok {
		t.Error("KUBE-S missing")
	}
	if err := f.EnsureRuleAtFront(ctx, TableNAT, ChainOutput, "-j", "KUBE-NOPE"); err == nil {
		t.Error("jump to a missing chain accepted")
	}
}

func TestFakeSaveRoundTrips(t *testing.T) {
	f := NewFake()
	must(t, f.Restore(ctx, []byte("*nat\n:KUBE-A - [0:0]\n-A KUBE-A -m comment --comment \"a b\" -j RETURN\nCOMMIT\n")))
	save, err := f.Save(ctx, TableNAT)
	must(t, err)
	g := NewFake()
	// Built-in chain lines in save output flush them, which is fine here.
	must(t, g.Restore(ctx, save))
	if g.Dump() != f.Dump() {
		t.Errorf("round trip:\n%s\nvs\n%s", g.Dump(), f.Dump())
	}
}

func TestSplitRule(t *testing.T) {
	got := SplitRule(`-m comment --comment "ns/svc:p cluster IP" -d 1.2.3.4 -j KUBE-X`)
	want := []string{"-m", "comment", "--comment", "ns/svc:p cluster IP", "-d", "1.2.3.4", "-j", "KUBE-X"}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Errorf("SplitRule = %q", got)
	}
	if JoinArgs(want) != `-m comment --comment "ns/svc:p cluster IP" -d 1.2.3.4 -j KUBE-X` {
		t.Errorf("JoinArgs = %q", JoinArgs(want))
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
