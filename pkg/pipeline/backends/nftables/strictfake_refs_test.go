package nftables

import (
	"context"
	"fmt"
	"regexp"
	"strings"
	"testing"

	"sigs.k8s.io/knftables"
)

// chainRefs tracks which chains are still the target of a goto/jump, from
// a rule or a verdict-map element, as the kernel does: it refuses to delete
// a referenced chain (EBUSY) even when the referrer goes later in the same
// transaction.
type chainRefs map[string]map[string]bool // target chain -> referrers

var (
	verdictRef = regexp.MustCompile(`\b(?:goto|jump) ([A-Za-z0-9_.:/-]+)`)
	ruleLine   = regexp.MustCompile(`^(?:add|insert) rule \S+ \S+ (\S+) (.*)$`)
	chainLine  = regexp.MustCompile(`^(flush|delete) chain \S+ \S+ (\S+)`)
	elemLine   = regexp.MustCompile(`^(add|delete) element \S+ \S+ (\S+) \{ (.*) \}$`)
	mapDelLine = regexp.MustCompile(`^delete map \S+ \S+ (\S+)`)
)

func (r chainRefs) add(referrer, text string) {
	for _, m := range verdictRef.FindAllStringSubmatch(text, -1) {
		if r[m[1]] == nil {
			r[m[1]] = map[string]bool{}
		}
		r[m[1]][referrer] = true
	}
}

func (r chainRefs) drop(referrer string) {
	for _, from := range r {
		delete(from, referrer)
	}
}

// dropMap drops the references of every element of map name: deleting a
// map deletes its elements.
func (r chainRefs) dropMap(name string) {
	for _, from := range r {
		for referrer := range from {
			if strings.HasPrefix(referrer, "element "+name+" ") {
				delete(from, referrer)
			}
		}
	}
}

// currentRefs reads the references in the fake's table.
func (f *strictFake) currentRefs() chainRefs {
	refs := chainRefs{}
	if f.Table == nil {
		return refs
	}
	for name, ch := range f.Table.Chains {
		for _, rule := range ch.Rules {
			refs.add("chain "+name, rule.Rule)
		}
	}
	for name, m := range f.Table.Maps {
		for _, e := range m.Elements {
			refs.add("element "+name+" "+strings.Join(e.Key, " . "), strings.Join(e.Value, " "))
		}
	}
	return refs
}

// checkChainRefs fails when text deletes a chain that is still referenced
// at that point of the transaction.
func (f *strictFake) checkChainRefs(text string) error {
	refs := f.currentRefs()
	for _, line := range strings.Split(text, "\n") {
		if m := ruleLine.FindStringSubmatch(line); m != nil {
			refs.add("chain "+m[1], m[2])
		} else if m := elemLine.FindStringSubmatch(line); m != nil {
			key, value, _ := strings.Cut(m[3], " : ")
			referrer := "element " + m[2] + " " + key
			if m[1] == "delete" {
				refs.drop(referrer)
			} else {
				refs.add(referrer, value)
			}
		} else if m := mapDelLine.FindStringSubmatch(line); m != nil {
			refs.dropMap(m[1])
		} else if m := chainLine.FindStringSubmatch(line); m != nil {
			refs.drop("chain " + m[2])
			if m[1] == "delete" {
				for from := range refs[m[2]] {
					return fmt.Errorf("strict fake: %q while %s still jumps to it (kernel: Device or resource busy)", line, from)
				}
			}
		}
	}
	return nil
}

func TestStrictFakeRefusesDeletingAReferencedChain(t *testing.T) {
	ctx := context.Background()
	fake := newStrictFake(knftables.IPv4Family)
	tx := fake.NewTransaction()
	tx.Add(&knftables.Table{})
	tx.Add(&knftables.Chain{Name: "a"})
	tx.Add(&knftables.Chain{Name: "b"})
	tx.Add(&knftables.Rule{Chain: "b", Rule: "goto a"})
	if err := fake.Run(ctx, tx); err != nil {
		t.Fatal(err)
	}
	tx = fake.NewTransaction()
	tx.Delete(&knftables.Chain{Name: "a"})
	tx.Flush(&knftables.Chain{Name: "b"})
	tx.Delete(&knftables.Chain{Name: "b"})
	if err := fake.Run(ctx, tx); err == nil {
		t.Fatal("deleting a chain another chain jumps to was accepted")
	}
	tx = fake.NewTransaction()
	tx.Flush(&knftables.Chain{Name: "b"})
	tx.Delete(&knftables.Chain{Name: "a"})
	tx.Delete(&knftables.Chain{Name: "b"})
	if err := fake.Run(ctx, tx); err != nil {
		t.Fatalf("flush first, then delete: %v", err)
	}
}
