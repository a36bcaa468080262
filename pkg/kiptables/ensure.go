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
// would one by one. It returns the table's iptables-save output when it
// read one, else nil.
//
// On iptables-legacy every single-rule call reads (and a change rewrites)
// the whole table — ~0.2–0.7 s each with 10k services — so the table is
// read once with iptables-save and only what is missing is added. On
// iptables-nft a single-rule call fetches just the chains it names and
// costs milliseconds, while iptables-nft-save dumps every table (seconds
// at that size), so there the calls are made directly.
func EnsureAtFront(ctx context.Context, ipt Interface, table Table, chains []string, rules []FrontRule) ([]byte, error) {
	var save []byte
	haveChain := func(string) bool { return false }
	haveRule := func(FrontRule) bool { return false }
	if ipt.Flavour() != FlavourNFT {
		var err error
		if save, err = ipt.Save(ctx, table); err != nil {
			klog.ErrorS(err, "iptables-save failed; checking the jump rules one by one", "table", table)
			save = nil
		} else {
			haveChain, haveRule = savedChecks(save, rules)
		}
	}
	for _, c := range chains {
		if haveChain(c) {
			continue
		}
		if err := ipt.EnsureChain(ctx, table, c); err != nil {
			return save, err
		}
	}
	for _, r := range rules {
		if haveRule(r) {
			continue
		}
		if err := ipt.EnsureRuleAtFront(ctx, table, r.Chain, r.Rule...); err != nil {
			return save, err
		}
	}
	return save, nil
}

// savedChecks answers from iptables-save output whether a chain exists
// and whether a rule is in its chain. A rule is looked for as
// iptables-save prints it ("-A CHAIN" + JoinArgs); a rule spelled
// differently is reported missing, which costs an EnsureRuleAtFront call
// (that checks again) but is never wrong.
func savedChecks(save []byte, rules []FrontRule) (haveChain func(string) bool, haveRule func(FrontRule) bool) {
	wanted := map[string]bool{}
	for _, r := range rules {
		wanted[r.Chain] = true
	}
	chains, lines := map[string]bool{}, map[string]bool{}
	eachLine([][]byte{save}, func(line []byte, _ int) {
		switch {
		case len(line) > 1 && line[0] == ':':
			name, _, _ := bytes.Cut(line[1:], []byte(" "))
			chains[string(name)] = true
		case bytes.HasPrefix(line, []byte("-A ")):
			// Only the chains we put rules in: nat holds 350k rules at
			// 10k services.
			chain, _, _ := bytes.Cut(line[3:], []byte(" "))
			if wanted[string(chain)] {
				lines[string(line)] = true
			}
		}
	})
	haveChain = func(c string) bool { return chains[c] }
	haveRule = func(r FrontRule) bool { return lines[fmt.Sprintf("-A %s %s", r.Chain, JoinArgs(r.Rule))] }
	return haveChain, haveRule
}
