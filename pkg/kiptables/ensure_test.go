package kiptables

import (
	"bytes"
	"context"
	"slices"
	"testing"
)

// counting counts the calls made through it that run a tool: single-rule
// calls, saves, listings and restores.
type counting struct {
	*Fake
	flavour                     Flavour
	single, save, list, restore int
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
func (c *counting) Restore(ctx context.Context, data ...[]byte) error {
	c.restore++
	return c.Fake.Restore(ctx, data...)
}
func (c *counting) ChainExists(ctx context.Context, t Table, chain string) (bool, error) {
	c.single++
	return c.Fake.ChainExists(ctx, t, chain)
}
func (c *counting) EnsureChain(ctx context.Context, t Table, chain string) error {
	c.single++
	return c.Fake.EnsureChain(ctx, t, chain)
}
func (c *counting) EnsureRuleAtFront(ctx context.Context, t Table, chain string, rule ...string) error {
	c.single++
	return c.Fake.EnsureRuleAtFront(ctx, t, chain, rule...)
}

func (c *counting) reset() { c.single, c.save, c.list, c.restore = 0, 0, 0, 0 }

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
	// the four rules, in one restore: the saves list every chain.
	t.Logf("empty tables: %d saves, %d single calls, %d restores", c.save, c.single, c.restore)
	if c.save != 2 || c.single != 0 || c.restore != 1 {
		t.Errorf("empty tables: %d saves, %d single calls, %d restores; want 2, 0 and 1", c.save, c.single, c.restore)
	}
	want := "-j KUBE-OTHER\n" + `-m comment --comment "kubernetes service portals" -j KUBE-SERVICES`
	if got := c.Table(TableNAT).Chains[ChainPrerouting].Rules; len(got) != 2 || got[0]+"\n"+got[1] != want {
		t.Errorf("PREROUTING = %q", got)
	}
	c.reset()
	saved, err := EnsureAtFront(ctx, c, natFront)
	if err != nil || c.save != 2 || c.single != 0 || c.restore != 0 || !slices.Contains(saved[TableNAT], "KUBE-SERVICES") {
		t.Errorf("second time: %d saves, %d single calls, %d restores, chains %q, %v; want 2, 0, 0, KUBE-SERVICES among nat's, nil",
			c.save, c.single, c.restore, saved, err)
	}
}

// TestEnsureAtFrontListsOnceOnNFT: on iptables-nft one listing reads
// every table, creates the canary and, where nothing is missing, is all
// there is; what is missing is added by one restore, a jump at the front,
// and a chain only when no jump proves it exists and a check finds none.
func TestEnsureAtFrontListsOnceOnNFT(t *testing.T) {
	c := &counting{Fake: NewFake(), flavour: FlavourNFT}
	if saved, err := EnsureAtFront(ctx, c, natFront); err != nil || saved != nil {
		t.Fatalf("empty tables: chains %q, %v", saved, err)
	}
	// The canary came with the listing; KUBE-SERVICES, KUBE-OTHER and
	// KUBE-FILTERED are checked, then created with the four rules.
	t.Logf("empty tables: %d listings, %d single calls, %d restores", c.list, c.single, c.restore)
	if c.list != 1 || c.save != 0 || c.single != 3 || c.restore != 1 {
		t.Errorf("empty tables: %d listings, %d saves, %d single calls, %d restores; want 1, 0, 3 and 1", c.list, c.save, c.single, c.restore)
	}
	legacy := &counting{Fake: NewFake(), flavour: FlavourLegacy}
	if _, err := EnsureAtFront(ctx, legacy, natFront); err != nil {
		t.Fatal(err)
	}
	if got, want := c.Dump(), legacy.Dump(); got != want {
		t.Errorf("nft path wrote\n%s\nthe legacy path\n%s", got, want)
	}
	c.reset()
	if _, err := EnsureAtFront(ctx, c, natFront); err != nil || c.list != 1 || c.single != 0 || c.restore != 0 {
		t.Errorf("second time: %d listings, %d single calls, %d restores, %v; want 1, 0, 0, nil", c.list, c.single, c.restore, err)
	}

	// PREROUTING's jump to KUBE-SERVICES goes; OUTPUT's still proves the
	// chain exists. A rule of someone else's stays behind ours.
	must(t, c.DeleteRule(ctx, TableNAT, ChainPrerouting, portals...))
	must(t, c.Fake.EnsureRuleAtFront(ctx, TableNAT, ChainPrerouting, "-j", "RETURN"))
	c.DeleteChain(TableNAT, "KUBE-CANARY")
	c.reset()
	if _, err := EnsureAtFront(ctx, c, natFront); err != nil || c.list != 1 || c.single != 0 || c.restore != 1 {
		t.Errorf("one jump gone: %d listings, %d single calls, %d restores, %v; want 1, 0, 1, nil", c.list, c.single, c.restore, err)
	}
	got := c.Table(TableNAT).Chains[ChainPrerouting].Rules
	if want := []string{JoinArgs(portals), "-j RETURN", "-j KUBE-OTHER"}; !slices.Equal(got, want) {
		t.Errorf("PREROUTING = %q, want %q", got, want)
	}
	if c.Table(TableNAT).Chains["KUBE-CANARY"] == nil {
		t.Error("the canary was not recreated")
	}
}

// frontStarts are what the tables hold before EnsureAtFront(natFront):
// nothing, some of the jumps and others' rules in the chains, target
// chains with rules but no jump to them.
var frontStarts = map[string]string{
	"empty": "",
	"some jumps gone, others' rules": "*nat\n:KUBE-SERVICES - [0:0]\n:KUBE-OTHER - [0:0]\n-A KUBE-SERVICES -j RETURN\n" +
		"-A PREROUTING -j ACCEPT\n-A PREROUTING -j KUBE-OTHER\n-A OUTPUT -j ACCEPT\nCOMMIT\n" +
		"*filter\n-A OUTPUT -j ACCEPT\nCOMMIT\n",
	"chains without jumps": "*nat\n:KUBE-SERVICES - [0:0]\n:KUBE-OTHER - [0:0]\n-A KUBE-SERVICES -j RETURN\n" +
		"-A KUBE-OTHER -j RETURN\nCOMMIT\n*filter\n:KUBE-FILTERED - [0:0]\n-A KUBE-FILTERED -j DROP\nCOMMIT\n",
}

// oneByOne is a Fake holding start after the calls one at a time that
// EnsureAtFront(natFront) replaces.
func oneByOne(t *testing.T, start string) *Fake {
	f := NewFake()
	if start != "" {
		must(t, f.Restore(ctx, []byte(start)))
	}
	for _, ft := range natFront {
		must(t, ensureOneByOne(ctx, f, ft))
	}
	return f
}

// TestEnsureAtFrontAsOneByOne: whatever the tables hold beforehand, both
// flavours' paths leave them as the calls one at a time do, a target
// chain's rules included.
func TestEnsureAtFrontAsOneByOne(t *testing.T) {
	for name, start := range frontStarts {
		want := oneByOne(t, start).Dump()
		for _, fl := range []Flavour{FlavourNFT, FlavourLegacy} {
			c := &counting{Fake: NewFake(), flavour: fl}
			if start != "" {
				must(t, c.Fake.Restore(ctx, []byte(start)))
			}
			if _, err := EnsureAtFront(ctx, c, natFront); err != nil {
				t.Fatalf("%s, %s: %v", name, fl, err)
			}
			if got := c.Dump(); got != want {
				t.Errorf("%s, %s:\n%s\none at a time:\n%s", name, fl, got, want)
			}
		}
	}
}

// respelling lists the portals jump as another tool version might print
// it (the comment unquoted, its words joined), while its -C check, like
// the real tool's, compares the rule itself.
type respelling struct{ *counting }

func (r respelling) respell(b []byte) []byte {
	return bytes.ReplaceAll(b, []byte(`--comment "kubernetes service portals"`), []byte(`--comment kubernetes_service_portals`))
}
func (r respelling) Save(ctx context.Context, t Table) ([]byte, error) {
	b, err := r.counting.Save(ctx, t)
	return r.respell(b), err
}
func (r respelling) ListEnsuring(ctx context.Context, req []ListRequest) (map[Table][]byte, error) {
	m, err := r.counting.ListEnsuring(ctx, req)
	for t, b := range m {
		m[t] = r.respell(b)
	}
	return m, err
}

// TestEnsureAtFrontRespelledRuleIsNotDuplicated: a jump the tool lists
// in another spelling is there; full syncs after the first check it with
// the tool's -C and insert nothing, where inserting what the listing does
// not show verbatim would add a duplicate on every sync.
func TestEnsureAtFrontRespelledRuleIsNotDuplicated(t *testing.T) {
	for _, fl := range []Flavour{FlavourNFT, FlavourLegacy} {
		r := respelling{&counting{Fake: NewFake(), flavour: fl}}
		for i := range 3 {
			if _, err := EnsureAtFront(ctx, r, natFront); err != nil {
				t.Fatalf("%s, sync %d: %v", fl, i, err)
			}
		}
		for _, chain := range []string{ChainPrerouting, ChainOutput} {
			n := 0
			for _, rule := range r.Table(TableNAT).Chains[chain].Rules {
				if rule == JoinArgs(portals) {
					n++
				}
			}
			if n != 1 {
				t.Errorf("%s: nat %s holds the portals jump %d times after three syncs, want once", fl, chain, n)
			}
		}
		r.reset()
		if _, err := EnsureAtFront(ctx, r, natFront); err != nil || r.restore != 0 || r.single != 2 {
			t.Errorf("%s, unchanged: %d restores, %d single calls, %v; want 0, 2 (the two -C checks), nil", fl, r.restore, r.single, err)
		}
	}
}
