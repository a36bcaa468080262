package kiptables

import (
	"bytes"
	"context"
	"fmt"

	"k8s.io/klog/v2"
)

// FrontRule is a rule kept at the front of a (built-in) chain.
type FrontRule struct {
	Chain string
	Rule  []string
}

// EnsureAtFront makes sure chains exist in table and each rule is in its
// chain, inserting missing rules at the front in the order given (so the
// last one given ends up first), as EnsureChain and EnsureRuleAtFront
// would one by one. It returns the chains the table held when it read
// them (from iptables-save), else nil: the names, not the save, which at
// 10k services is ~40 MB that a caller would hold through its sync.
//
// On iptables-legacy every single-rule call reads (and a change rewrites)
// the whole table — ~0.2–0.7 s each with 10k services — so the table is
// read once with iptables-save and only what is missing is added. On
// iptables-nft a single-rule call fetches just the chains it names and
// costs milliseconds, while iptables-nft-save dumps every table (seconds
// at that size), so there the calls are made directly.
func EnsureAtFront(ctx context.Context, ipt Interface, table Table, chains []string, rules []FrontRule) (saved []string, err error) {
	haveChain := func(string) bool { return false }
	haveRule := func(FrontRule) bool { return false }
	if ipt.Flavour() != FlavourNFT {
		if save, err := ipt.Save(ctx, table); err != nil {
			klog.ErrorS(err, "iptables-save failed; checking the jump rules one by one", "table", table)
		} else {
			saved, haveChain, haveRule = savedChecks(save, rules)
		}
	}
	for _, c := range chains {
		if haveChain(c) {
			continue
		}
		if err := ipt.EnsureChain(ctx, table, c); err != nil {
			return saved, err
		}
	}
	for _, r := range rules {
		if haveRule(r) {
			continue
		}
		if err := ipt.EnsureRuleAtFront(ctx, table, r.Chain, r.Rule...); err != nil {
			return saved, err
		}
	}
	return saved, nil
}

// savedChecks lists the chains of iptables-save output and answers from
// it whether a chain exists and whether a rule is in its chain. A rule is looked for as
// iptables-save prints it ("-A CHAIN" + JoinArgs); a rule spelled
// differently is reported missing, which costs an EnsureRuleAtFront call
// (that checks again) but is never wrong.
func savedChecks(save []byte, rules []FrontRule) (names []string, haveChain func(string) bool, haveRule func(FrontRule) bool) {
	wanted := map[string]bool{}
	for _, r := range rules {
		wanted[r.Chain] = true
	}
	chains, lines := map[string]bool{}, map[string]bool{}
	for rest := save; len(rest) > 0; {
		var line []byte
		line, rest, _ = bytes.Cut(rest, []byte("\n"))
		switch {
		case len(line) > 1 && line[0] == ':':
			name, _, _ := bytes.Cut(line[1:], []byte(" "))
			names = append(names, string(name))
			chains[names[len(names)-1]] = true
		case bytes.HasPrefix(line, []byte("-A ")):
			// Only the chains we put rules in: nat holds 350k rules at
			// 10k services.
			chain, _, _ := bytes.Cut(line[3:], []byte(" "))
			if wanted[string(chain)] {
				lines[string(line)] = true
			}
		}
	}
	haveChain = func(c string) bool { return chains[c] }
	haveRule = func(r FrontRule) bool { return lines[fmt.Sprintf("-A %s %s", r.Chain, JoinArgs(r.Rule))] }
	return names, haveChain, haveRule
}
