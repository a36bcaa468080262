package kiptables

import (
	"context"
	"slices"
	"testing"
)

// counting counts the single-rule calls, saves and listings made through
// it.
type counting struct {
	*Fake
	flavour            Flavour
	single, save, list int
}

func (c *counting) Flavour() Flavour { return c.flavour }
func (c *counting) Save(ctx context.Context, t Table) ([]byte, error) {
	c.save++
	return c.Fake.Save(ctx, t)
}
func (c *counting) ListEnsuring(ctx context.Context, req []ListRequest) (map[Table][]byte, error) {
	c.list++
	return c.Fake.ListEnsuring(ctx, req)
}
func (c *counting) EnsureChain(ctx context.Context, t Table, chain string) error {
	c.single++
	return c.Fake.EnsureChain(ctx, t, chain)
}
func (c *counting) EnsureRuleAtFront(ctx context.Context, t Table, chain string, rule ...string) error {
	c.single++
	return c.Fake.EnsureRuleAtFront(ctx, t, chain, rule...)
}

func (c *counting) reset() { c.single, c.save, c.list = 0, 0, 0 }

var portals = []string{"-m", "comment", "--comment", "kubernetes service portals", "-j", "KUBE-SERVICES"}

// natFront is a canary and three jumps to two chains in nat, and a jump
// in filter's OUTPUT (the name nat has too).
var natFront = []FrontTable{
	{Table: TableNAT, Empty: []string{"KUBE-CANARY"}, Rules: []FrontRule{
		{ChainOutput, portals},
		{ChainPrerouting, portals},
		{ChainPrerouting, []string{"-j", "KUBE-OTHER"}},
	}},
	{Table: TableFilter, Rules: []FrontRule{{ChainOutput, []string{"-j", "KUBE-FILTERED"}}}},
}

func TestEnsureAtFrontChecksWithOneSave(t *testing.T) {
	c := &counting{Fake: NewFake(), flavour: FlavourLegacy}
	if _, err := EnsureAtFront(ctx, c, natFront); err != nil {
		t.Fatal(err)
	}
	// Chains KUBE-CANARY, KUBE-SERVICES, KUBE-OTHER, KUBE-FILTERED and
	// the four rules.
	if c.save != 2 || c.single != 8 {
		t.Errorf("empty tables: %d saves, %d single calls; want 2 and 8", c.save, c.single)
	}
	want := "-j KUBE-OTHER\n" + `-m comment --comment "kubernetes service portals" -j KUBE-SERVICES`
	if got := c.Table(TableNAT).Chains[ChainPrerouting].Rules; len(got) != 2 || got[0]+"\n"+got[1] != want {
		t.Errorf("PREROUTING = %q", got)
	}
	c.reset()
	saved, err := EnsureAtFront(ctx, c, natFront)
	if err != nil || c.save != 2 || c.single != 0 || !slices.Contains(saved[TableNAT], "KUBE-SERVICES") {
		t.Errorf("second time: %d saves, %d single calls, chains %q, %v; want 2, 0, KUBE-SERVICES among nat's, nil", c.save, c.single, saved, err)
	}
}

// TestEnsureAtFrontListsOnceOnNFT: on iptables-nft one listing reads
// every table, creates the canary and, where nothing is missing, is all
// there is; a missing jump is added at the front, and its chain created
// only when no jump already proves it exists.
func TestEnsureAtFrontListsOnceOnNFT(t *testing.T) {
	c := &counting{Fake: NewFake(), flavour: FlavourNFT}
	if saved, err := EnsureAtFront(ctx, c, natFront); err != nil || saved != nil {
		t.Fatalf("empty tables: chains %q, %v", saved, err)
	}
	// The canary came with the listing; KUBE-SERVICES, KUBE-OTHER,
	// KUBE-FILTERED and the four rules one call each.
	if c.list != 1 || c.save != 0 || c.single != 7 {
		t.Errorf("empty tables: %d listings, %d saves, %d single calls; want 1, 0 and 7", c.list, c.save, c.single)
	}
	legacy := &counting{Fake: NewFake(), flavour: FlavourLegacy}
	if _, err := EnsureAtFront(ctx, legacy, natFront); err != nil {
		t.Fatal(err)
	}
	if got, want := c.Dump(), legacy.Dump(); got != want {
		t.Errorf("nft path wrote\n%s\nthe legacy path\n%s", got, want)
	}
	c.reset()
	if _, err := EnsureAtFront(ctx, c, natFront); err != nil || c.list != 1 || c.single != 0 {
		t.Errorf("second time: %d listings, %d single calls, %v; want 1, 0, nil", c.list, c.single, err)
	}

	// PREROUTING's jump to KUBE-SERVICES goes; OUTPUT's still proves the
	// chain exists. A rule of someone else's stays behind ours.
	must(t, c.DeleteRule(ctx, TableNAT, ChainPrerouting, portals...))
	must(t, c.Fake.EnsureRuleAtFront(ctx, TableNAT, ChainPrerouting, "-j", "RETURN"))
	c.DeleteChain(TableNAT, "KUBE-CANARY")
	c.reset()
	if _, err := EnsureAtFront(ctx, c, natFront); err != nil || c.list != 1 || c.single != 1 {
		t.Errorf("one jump gone: %d listings, %d single calls, %v; want 1, 1, nil", c.list, c.single, err)
	}
	got := c.Table(TableNAT).Chains[ChainPrerouting].Rules
	if want := []string{JoinArgs(portals), "-j RETURN", "-j KUBE-OTHER"}; !slices.Equal(got, want) {
		t.Errorf("PREROUTING = %q, want %q", got, want)
	}
	if c.Table(TableNAT).Chains["KUBE-CANARY"] == nil {
		t.Error("the canary was not recreated")
	}
}
