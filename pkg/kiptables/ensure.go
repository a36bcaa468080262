package kiptables

import (
	"bytes"
	"context"
	"slices"

	"k8s.io/klog/v2"
)

// FrontRule is a rule kept at the front of a (built-in) chain.
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
// Only what is missing costs a single-rule call. What is there is read
// first, in the way each flavour reads cheapest. On iptables-legacy every
// call reads (and a change rewrites) the whole table — ~0.2–0.7 s each
// with 10k services — so each table is read once with iptables-save. On
// iptables-nft a call fetches just the chains it names, while
// iptables-nft-save dumps every table (seconds at that size); there one
// ListEnsuring run creates the Empty chains and lists the chains the
// rules go in, for all tables at once, each tool run costing more than
// what it fetches. A jump that is there proves its target chain exists.
// A failed read is logged and everything is checked one call at a time.
func EnsureAtFront(ctx context.Context, ipt Interface, tables []FrontTable) (saved map[Table][]string, err error) {
	var have []present
	if ipt.Flavour() == FlavourNFT {
		have = listPresent(ctx, ipt, tables)
	} else {
		have, saved = savePresent(ctx, ipt, tables)
	}
	for i, t := range tables {
		for _, c := range t.chains() {
			if have[i].chains[c] {
				continue
			}
			if err := ipt.EnsureChain(ctx, t.Table, c); err != nil {
				return saved, err
			}
		}
		for _, r := range t.Rules {
			if have[i].rules[r.line()] {
				continue
			}
			if err := ipt.EnsureRuleAtFront(ctx, t.Table, r.Chain, r.Rule...); err != nil {
				return saved, err
			}
		}
	}
	return saved, nil
}

// present is what one table is known to hold: chains by name, rules by
// their iptables-save line. A rule spelled differently than iptables-save
// prints it is reported missing, which costs an EnsureRuleAtFront call
// (that checks again) but is never wrong.
type present struct {
	chains, rules map[string]bool
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
			if have[i].rules[r.line()] {
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
	have = present{chains: map[string]bool{}, rules: map[string]bool{}}
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
			}
		}
	}
	return names, have
}
