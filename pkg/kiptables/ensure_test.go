package kiptables

import (
	"context"
	"slices"
	"testing"
)

// counting counts the single-rule calls and saves made through it.
type counting struct {
	*Fake
	flavour      Flavour
	single, save int
}

func (c *counting) Flavour() Flavour { return c.flavour }
func (c *counting) Save(ctx context.Context, t Table) ([]byte, error) {
	c.save++
	return c.Fake.Save(ctx, t)
}
func (c *counting) EnsureChain(ctx context.Context, t Table, chain string) error {
	c.single++
	return c.Fake.EnsureChain(ctx, t, chain)
}
func (c *counting) EnsureRuleAtFront(ctx context.Context, t Table, chain string, rule ...string) error {
	c.single++
	return c.Fake.EnsureRuleAtFront(ctx, t, chain, rule...)
}

func TestEnsureAtFrontChecksWithOneSave(t *testing.T) {
	chains := []string{"KUBE-CANARY", "KUBE-SERVICES"}
	rules := []FrontRule{
		{ChainOutput, []string{"-m", "comment", "--comment", "kubernetes service portals", "-j", "KUBE-SERVICES"}},
		{ChainPrerouting, []string{"-m", "comment", "--comment", "kubernetes service portals", "-j", "KUBE-SERVICES"}},
		{ChainPrerouting, []string{"-j", "KUBE-CANARY"}},
	}
	c := &counting{Fake: NewFake(), flavour: FlavourLegacy}
	if _, err := EnsureAtFront(ctx, c, TableNAT, chains, rules); err != nil {
		t.Fatal(err)
	}
	if c.save != 1 || c.single != 5 {
		t.Errorf("empty table: %d saves, %d single calls; want 1 and 5", c.save, c.single)
	}
	want := "-j KUBE-CANARY\n" + `-m comment --comment "kubernetes service portals" -j KUBE-SERVICES`
	if got := c.Table(TableNAT).Chains[ChainPrerouting].Rules; len(got) != 2 || got[0]+"\n"+got[1] != want {
		t.Errorf("PREROUTING = %q", got)
	}
	c.save, c.single = 0, 0
	saved, err := EnsureAtFront(ctx, c, TableNAT, chains, rules)
	if err != nil || c.save != 1 || c.single != 0 || !slices.Contains(saved, "KUBE-SERVICES") {
		t.Errorf("second time: %d saves, %d single calls, chains %q, %v; want 1, 0, KUBE-SERVICES among them, nil", c.save, c.single, saved, err)
	}
	// iptables-nft: single calls only, every time.
	c.flavour, c.save, c.single = FlavourNFT, 0, 0
	if saved, err := EnsureAtFront(ctx, c, TableNAT, chains, rules); err != nil || c.save != 0 || c.single != 5 || saved != nil {
		t.Errorf("nft: %d saves, %d single calls, chains %q, %v", c.save, c.single, saved, err)
	}
}
