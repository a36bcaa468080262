package nftables

import (
	"context"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"sigs.k8s.io/knftables"

	"github.com/svcproxy/svcproxy/pkg/knft"
)

// strictFake is a knftables.Fake that also refuses what nft 1.0.6 refuses
// but the Fake accepts: a rule that reads a "typeof … numgen" map, added
// in a transaction that does not create that map. nft rebuilds such a
// map's key type from the kernel's udata and fails with "conflicting
// protocols specified: tcp vs. th"; re-declaring the map ("add map" of an
// existing one) does not help, deleting and adding it in the transaction
// does. It also refuses, as the kernel does (ENFILE), an element add that
// takes a set or map beyond its size at that point of the transaction,
// and (EOPNOTSUPP) an "add" of an existing base chain at another hook,
// type or priority, which the Fake ignores; and a set or map used as what
// it is not (strictfake_types_test.go).
// afterRun, when set, sees every committed transaction.
type strictFake struct {
	*knftables.Fake
	afterRun func()
}

func newStrictFake(family knftables.Family) *strictFake {
	return &strictFake{Fake: knftables.NewFake(family, TableName)}
}

func (f *strictFake) Run(ctx context.Context, tx *knftables.Transaction) error {
	if err := f.checkNumgenMaps(tx.String()); err != nil {
		return err
	}
	if err := f.checkChainRefs(tx.String()); err != nil {
		return err
	}
	if err := f.checkSizes(tx.String()); err != nil {
		return err
	}
	if err := f.checkBaseChainMoves(tx.String()); err != nil {
		return err
	}
	if err := f.checkShapes(tx.String()); err != nil {
		return err
	}
	if err := f.Fake.Run(ctx, tx); err != nil {
		return err
	}
	if f.afterRun != nil {
		f.afterRun()
	}
	return nil
}

var (
	numgenMapRef = regexp.MustCompile(`numgen random mod \d+ map @(\S+)`)
	mapOp        = regexp.MustCompile(`^(add|delete) map \S+ \S+ (\S+)`)
)

// checkNumgenMaps fails when a rule in text reads a numgen map that the
// same transaction did not create (absent before, or deleted first).
func (f *strictFake) checkNumgenMaps(text string) error {
	existed := map[string]bool{}
	if f.Table != nil {
		for name := range f.Table.Maps {
			existed[name] = true
		}
	}
	created := map[string]bool{}
	for _, line := range strings.Split(text, "\n") {
		if m := mapOp.FindStringSubmatch(line); m != nil {
			if m[1] == "delete" {
				existed[m[2]], created[m[2]] = false, false
			} else if !existed[m[2]] {
				created[m[2]] = true
			}
			continue
		}
		if !strings.HasPrefix(line, "add rule ") && !strings.HasPrefix(line, "insert rule ") {
			continue
		}
		for _, m := range numgenMapRef.FindAllStringSubmatch(line, -1) {
			if !created[m[1]] {
				return fmt.Errorf("strict fake: %q reads numgen map %s, which this transaction does not create "+
					"(nft 1.0.6: conflicting protocols specified)", line, m[1])
			}
		}
	}
	return nil
}

// TestStrictFakeRefusesLateNumgenRule guards the checker itself with the
// transactions that failed against nft 1.0.6, and the ones that passed.
func TestStrictFakeRefusesLateNumgenRule(t *testing.T) {
	ctx := context.Background()
	fake := newStrictFake(knftables.IPv4Family)
	typeOf := "ip daddr . meta l4proto . th dport . numgen random mod 1 : ip daddr . th dport"
	rule := func(chain, m string) *knftables.Rule {
		return &knftables.Rule{Chain: chain, Rule: "dnat ip to ip daddr . meta l4proto . th dport . numgen random mod 2 map @" + m}
	}
	tx := fake.NewTransaction()
	tx.Add(&knftables.Table{})
	tx.Add(&knftables.Map{Name: "eps", TypeOf: typeOf})
	tx.Add(&knftables.Chain{Name: "two"})
	tx.Add(rule("two", "eps"))
	if err := fake.Run(ctx, tx); err != nil {
		t.Fatalf("map, chain and rule together: %v", err)
	}
	for name, add := range map[string]func(tx *knftables.Transaction){
		"a new rule on the existing map": func(tx *knftables.Transaction) {},
		"the map re-declared":            func(tx *knftables.Transaction) { tx.Add(&knftables.Map{Name: "eps", TypeOf: typeOf}) },
	} {
		tx := fake.NewTransaction()
		tx.Add(&knftables.Chain{Name: "three"})
		add(tx)
		tx.Add(rule("three", "eps"))
		if err := fake.Run(ctx, tx); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	tx = fake.NewTransaction()
	tx.Flush(&knftables.Chain{Name: "two"})
	tx.Delete(&knftables.Map{Name: "eps"})
	tx.Add(&knftables.Map{Name: "eps", TypeOf: typeOf})
	tx.Add(rule("two", "eps"))
	if err := fake.Run(ctx, tx); err != nil {
		t.Errorf("map deleted and added with the rule: %v", err)
	}
}

var (
	setDecl   = regexp.MustCompile(`^(add|delete) (?:set|map) \S+ \S+ (\S+)`)
	setSize   = regexp.MustCompile(`; size (\d+) ;`)
	elementOp = regexp.MustCompile(`^(add|delete) element \S+ \S+ (\S+) `)
)

// checkSizes fails when an element add in text takes a set beyond its
// size. knftables writes one element per line.
func (f *strictFake) checkSizes(text string) error {
	count, size := map[string]int{}, map[string]int{}
	if f.Table != nil {
		for name, m := range f.Table.Maps {
			count[name] = len(m.Elements)
			if m.Map.Size != nil {
				size[name] = int(*m.Map.Size)
			}
		}
		for name, st := range f.Table.Sets {
			count[name] = len(st.Elements)
			if st.Set.Size != nil {
				size[name] = int(*st.Set.Size)
			}
		}
	}
	for _, line := range strings.Split(text, "\n") {
		if m := setDecl.FindStringSubmatch(line); m != nil {
			if _, exists := count[m[2]]; m[1] == "add" && exists {
				continue // a re-declaration changes nothing
			}
			delete(count, m[2])
			delete(size, m[2])
			if m[1] == "add" {
				count[m[2]] = 0
				if sz := setSize.FindStringSubmatch(line); sz != nil {
					size[m[2]], _ = strconv.Atoi(sz[1])
				}
			}
			continue
		}
		m := elementOp.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		if m[1] == "delete" {
			count[m[2]]--
			continue
		}
		if count[m[2]]++; size[m[2]] > 0 && count[m[2]] > size[m[2]] {
			return fmt.Errorf("strict fake: %q: %s would hold %d elements, its size is %d (ENFILE)", line, m[2], count[m[2]], size[m[2]])
		}
	}
	return nil
}

// fakeKernel is the knft fake over nft: a knftables.Fake, or a strictFake
// or a wrapper of one (which commits the transactions).
func fakeKernel(nft knftables.Interface) *knft.Knftables {
	if f, ok := nft.(interface{ table() *knftables.Fake }); ok {
		return knft.NewFake(f.table(), nft)
	}
	return knft.NewFake(nft.(*knftables.Fake), nil)
}

func (f *strictFake) table() *knftables.Fake { return f.Fake }

var (
	chainDelete  = regexp.MustCompile(`^delete chain \S+ \S+ (\S+)$`)
	baseChainAdd = regexp.MustCompile(`^add chain \S+ \S+ (\S+) \{ type (\S+) hook (\S+) priority (\S+) ; \}$`)
)

// checkBaseChainMoves fails when text adds a base chain that exists
// (and was not deleted earlier in text) attached elsewhere.
func (f *strictFake) checkBaseChainMoves(text string) error {
	f.RLock()
	defer f.RUnlock()
	deleted := map[string]bool{}
	for _, line := range strings.Split(text, "\n") {
		if m := chainDelete.FindStringSubmatch(line); m != nil {
			deleted[m[1]] = true
			continue
		}
		m := baseChainAdd.FindStringSubmatch(line)
		if m == nil || deleted[m[1]] || f.Table == nil || f.Table.Chains[m[1]] == nil {
			continue
		}
		have := f.Table.Chains[m[1]].Chain
		if have.Hook == nil {
			return fmt.Errorf("add chain %s: a regular chain of that name exists (EEXIST)", m[1])
		}
		want, _ := knftables.ParsePriority(f.Table.Family, m[4])
		prio, _ := knftables.ParsePriority(f.Table.Family, string(*have.Priority))
		if string(*have.Type) != m[2] || string(*have.Hook) != m[3] || prio != want {
			return fmt.Errorf("add chain %s: exists at %s %s %d, not %s %s %d (EOPNOTSUPP: a base chain cannot move)",
				m[1], *have.Type, *have.Hook, prio, m[2], m[3], want)
		}
	}
	return nil
}
