package kiptables

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"sync"

	"k8s.io/klog/v2"
)

// FrontRule is a rule kept at the front of a (built-in) chain. Rule is
// spelled as iptables-save prints it: EnsureAtFront inserts a rule that
// the tables do not show verbatim.
type FrontRule struct {
	Chain string
	Rule  []string
}

// line is the rule as iptables-save prints it.
func (r FrontRule) line() string { return "-A " + r.Chain + " " + JoinArgs(r.Rule) }

// target is the chain the rule jumps to ("" for none).
func (r FrontRule) target() string {
	for i := 0; i+1 < len(r.Rule); i++ {
		if r.Rule[i] == "-j" || r.Rule[i] == "-g" {
			return r.Rule[i+1]
		}
	}
	return ""
}

// jump names the chain the rule is in and the chain it jumps to.
func (r FrontRule) jump() string { return r.Chain + " " + r.target() }

// FrontTable is what EnsureAtFront keeps in one table.
type FrontTable struct {
	Table Table
	// Empty are chains that only have to exist (canaries): nothing adds
	// rules to them, so recreating one over itself loses nothing.
	Empty []string
	// Rules are kept in their chains; the chains they jump to are created
	// first when missing.
	Rules []FrontRule
}

// chains lists the chains t needs, Empty first, each once.
func (t FrontTable) chains() []string {
	out := slices.Clone(t.Empty)
	for _, r := range t.Rules {
		if c := r.target(); c != "" && !isBuiltinTarget(c) && !slices.Contains(out, c) {
			out = append(out, c)
		}
	}
	return out
}

// EnsureAtFront makes sure, table by table, that the chains exist and
// each rule is in its chain, inserting missing rules at the front in the
// order given (so the last one given ends up first), as EnsureChain and
// EnsureRuleAtFront would one by one. It returns the chains each table
// held when it read them (iptables-save), if it did: the names, not the
// save, which grows with every Service and which a caller would otherwise
// hold through its sync.
//
// What is there is read first, in the way each flavour reads cheapest. On
// iptables-legacy every call reads (and a change rewrites) the whole table
// — ~0.2–0.7 s each with 10k services — so each table is read once with
// iptables-save. On iptables-nft a call fetches just the chains it names,
// while iptables-nft-save dumps every table (seconds at that size); there
// one ListEnsuring run creates the Empty chains and lists the chains the
// rules go in, for all tables at once, each tool run costing more than
// what it fetches. A jump that is there proves its target chain exists.
//
// What is missing is then added by one iptables-restore for all tables
// (":CHAIN" for a chain, "-I CHAIN" for a rule), so that a first start or
// a recovery from a flush costs one run, not one or two per chain and
// per rule. A ":CHAIN" line flushes a chain that exists, so it is written
// only for chains known to be missing: iptables-save lists every chain,
// while a listing on iptables-nft leaves a chain no jump proves unknown,
// and that one is checked with ChainExists (which there runs no tool). A
// table whose read failed is logged and checked one call at a time.
func EnsureAtFront(ctx context.Context, ipt Interface, tables []FrontTable) (saved map[Table][]string, err error) {
	var have []present
	if ipt.Flavour() == FlavourNFT {
		have = listPresent(ctx, ipt, tables)
	} else {
		have, saved = savePresent(ctx, ipt, tables)
	}
	var batch bytes.Buffer
	for i, t := range tables {
		if have[i].chains == nil {
			if err := ensureOneByOne(ctx, ipt, t); err != nil {
				return saved, err
			}
			continue
		}
		if err := writeMissing(ctx, ipt, &batch, t, have[i]); err != nil {
			return saved, err
		}
	}
	if batch.Len() == 0 {
		return saved, nil
	}
	if err := ipt.Restore(ctx, batch.Bytes()); err != nil {
		return saved, fmt.Errorf("adding the missing chains and rules: %w", err)
	}
	return saved, nil
}

// writeMissing writes t's restore section adding what have lacks; nothing
// when nothing is missing. The rules are inserted in the order given, as
// EnsureRuleAtFront calls would.
func writeMissing(ctx context.Context, ipt Interface, b *bytes.Buffer, t FrontTable, have present) error {
	start := b.Len()
	b.WriteString("*" + string(t.Table) + "\n")
	head := b.Len()
	for _, c := range t.chains() {
		if have.chains[c] {
			continue
		}
		if !have.allChains {
			ok, err := ipt.ChainExists(ctx, t.Table, c)
			if err != nil {
				return err
			}
			if ok {
				continue
			}
		}
		b.WriteString(":" + c + " - [0:0]\n")
	}
	for _, r := range t.Rules {
		switch {
		case have.rules[r.line()]:
		case have.jumps[r.jump()]:
			if err := ensureRespelled(ctx, ipt, t.Table, r); err != nil {
				return err
			}
		default:
			b.WriteString("-I " + r.Chain + " " + JoinArgs(r.Rule) + "\n")
		}
	}
	if b.Len() == head {
		b.Truncate(start)
		return nil
	}
	b.WriteString("COMMIT\n")
	return nil
}

// ensureRespelled ensures r with the tool's own check (-C compares rules,
// not their text) when the listing shows a jump from r's chain to r's
// target but not r as spelled: a tool that prints r otherwise than
// FrontRule spells it would have r inserted again on every full sync.
// Such a rule, when really missing, lands in front of the batch's.
func ensureRespelled(ctx context.Context, ipt Interface, table Table, r FrontRule) error {
	if _, warned := respelled.LoadOrStore(string(table)+" "+r.line(), true); !warned {
		klog.InfoS("A jump rule is not listed as svcproxy spells it; checking it with the tool on every full sync",
			"table", table, "rule", r.line())
	}
	return ipt.EnsureRuleAtFront(ctx, table, r.Chain, r.Rule...)
}

// respelled holds the rules ensureRespelled has logged, to log each once.
var respelled sync.Map

// ensureOneByOne ensures t with a call per chain and per rule, each of
// which checks first: for a table that could not be read.
func ensureOneByOne(ctx context.Context, ipt Interface, t FrontTable) error {
	for _, c := range t.chains() {
		if err := ipt.EnsureChain(ctx, t.Table, c); err != nil {
			return err
		}
	}
	for _, r := range t.Rules {
		if err := ipt.EnsureRuleAtFront(ctx, t.Table, r.Chain, r.Rule...); err != nil {
			return err
		}
	}
	return nil
}

// present is what one table is known to hold: chains by name, rules by
// their iptables-save line (nil chains: the table was not read), and the
// jumps among those rules by chain and target (FrontRule.jump). Rules
// are inserted unless the listing shows them verbatim, so a FrontRule is
// spelled as iptables-save prints it.
type present struct {
	chains, rules, jumps map[string]bool
	// allChains: chains names every chain of the table (iptables-save),
	// so one not in it is missing.
	allChains bool
}

// savePresent reads each table with iptables-save.
func savePresent(ctx context.Context, ipt Interface, tables []FrontTable) ([]present, map[Table][]string) {
	have := make([]present, len(tables))
	saved := map[Table][]string{}
	for i, t := range tables {
		save, err := ipt.Save(ctx, t.Table)
		if err != nil {
			klog.ErrorS(err, "iptables-save failed; checking the jump rules one by one", "table", t.Table)
			continue
		}
		saved[t.Table], have[i] = parsePresent(save, t.Rules)
		have[i].allChains = true
	}
	return have, saved
}

// listPresent reads every table with one ListEnsuring run, which also
// creates the Empty chains.
func listPresent(ctx context.Context, ipt Interface, tables []FrontTable) []present {
	have := make([]present, len(tables))
	req := make([]ListRequest, len(tables))
	for i, t := range tables {
		req[i] = ListRequest{Table: t.Table, Empty: t.Empty}
		for _, r := range t.Rules {
			if !slices.Contains(req[i].List, r.Chain) {
				req[i].List = append(req[i].List, r.Chain)
			}
		}
	}
	listed, err := ipt.ListEnsuring(ctx, req)
	if err != nil {
		klog.ErrorS(err, "Listing the built-in chains failed; checking the jump rules one by one")
		return have
	}
	for i, t := range tables {
		_, have[i] = parsePresent(listed[t.Table], t.Rules)
		for _, c := range t.Empty {
			have[i].chains[c] = true
		}
		for _, r := range t.Rules {
			if have[i].rules[r.line()] || have[i].jumps[r.jump()] {
				have[i].chains[r.target()] = true
			}
		}
	}
	return have
}

// parsePresent reads iptables-save output (or -S listings): the chains it
// declares, in order, and those of its rules that are in the chains rules
// go in.
func parsePresent(save []byte, rules []FrontRule) (names []string, have present) {
	wanted := map[string]bool{}
	for _, r := range rules {
		wanted[r.Chain] = true
	}
	have = present{chains: map[string]bool{}, rules: map[string]bool{}, jumps: map[string]bool{}}
	for rest := save; len(rest) > 0; {
		var line []byte
		line, rest, _ = bytes.Cut(rest, []byte("\n"))
		switch {
		case len(line) > 1 && line[0] == ':':
			name, _, _ := bytes.Cut(line[1:], []byte(" "))
			names = append(names, string(name))
			have.chains[names[len(names)-1]] = true
		case bytes.HasPrefix(line, []byte("-A ")):
			// Only the chains we put rules in: nat holds 350k rules at
			// 10k services.
			chain, _, _ := bytes.Cut(line[3:], []byte(" "))
			if wanted[string(chain)] {
				have.rules[string(line)] = true
				if target := jumpTarget(string(line)); target != "" {
					have.jumps[string(chain)+" "+target] = true
				}
			}
		}
	}
	return names, have
}
