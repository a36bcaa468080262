package kiptables

import (
	"fmt"
	"slices"
	"strings"
)

// restore applies iptables-restore input, committing each table at its
// COMMIT as the tools do; the caller holds f.mu.
func (f *Fake) restore(data string) error {
	var cur *FakeTable // working copy of the open section's table
	committed := false
	for n, line := range strings.Split(data, "\n") {
		line = strings.TrimSpace(line)
		if line == "" || line[0] == '#' {
			continue
		}
		if err := f.restoreLine(&cur, line); err != nil {
			err = fmt.Errorf("iptables-restore: line %d failed (%q): %w", n+1, line, err)
			if !committed && line != "COMMIT" {
				err = fmt.Errorf("%w: %w", ErrNothingCommitted, err)
			}
			return err
		}
		committed = committed || line == "COMMIT"
	}
	if cur != nil {
		return fmt.Errorf("iptables-restore: table %s has no COMMIT", cur.Name)
	}
	return nil
}

func (f *Fake) restoreLine(cur **FakeTable, line string) error {
	switch {
	case line[0] == '*':
		if *cur != nil {
			return fmt.Errorf("table %s not committed", (*cur).Name)
		}
		t := f.tables[Table(line[1:])]
		if t == nil {
			return fmt.Errorf("unknown table %q", line[1:])
		}
		*cur = t.clone()
		return nil
	case *cur == nil:
		return fmt.Errorf("no table open")
	case line == "COMMIT":
		if err := (*cur).checkTargets(); err != nil {
			return err
		}
		f.tables[(*cur).Name] = *cur
		*cur = nil
		return nil
	case line[0] == ':':
		name, _, _ := strings.Cut(line[1:], " ")
		if c := (*cur).Chains[name]; c != nil {
			c.Rules = nil // --noflush: a chain line flushes the chain
		} else {
			(*cur).Chains[name] = &FakeChain{Name: name}
		}
		return nil
	}
	op, rest, _ := strings.Cut(line, " ")
	chain, rule, _ := strings.Cut(rest, " ")
	c := (*cur).Chains[chain]
	if c == nil {
		return fmt.Errorf("chain %q does not exist", chain)
	}
	rule = strings.TrimSpace(rule)
	switch op {
	case "-A", "-I":
		if n, _, _ := strings.Cut(rule, " "); op == "-I" && strings.Trim(n, "0123456789") == "" {
			return fmt.Errorf("-I with a rule number (%s) is not supported", n)
		}
		// Both tools check a jump when they read the rule (iptables-nft
		// when it prepares the commands in order), so the target must be
		// declared on an earlier line, not merely by COMMIT.
		if target := jumpTarget(rule); target != "" && !isBuiltinTarget(target) && (*cur).Chains[target] == nil {
			return fmt.Errorf("rule jumps to chain %s, which does not exist yet", target)
		}
		if op == "-A" {
			c.Rules = append(c.Rules, rule)
		} else {
			// Without a rule number: at the front.
			c.Rules = append([]string{rule}, c.Rules...)
		}
	case "-X":
		return (*cur).deleteChain(c)
	default:
		return fmt.Errorf("unsupported command %q", op)
	}
	return nil
}

func (t *FakeTable) deleteChain(c *FakeChain) error {
	switch {
	case c.Builtin:
		return fmt.Errorf("cannot delete built-in chain %s", c.Name)
	case len(c.Rules) > 0:
		return fmt.Errorf("chain %s is not empty", c.Name)
	}
	for _, other := range t.Chains {
		if slices.ContainsFunc(other.Rules, func(r string) bool { return jumpTarget(r) == c.Name }) {
			return fmt.Errorf("chain %s is referenced from %s", c.Name, other.Name)
		}
	}
	delete(t.Chains, c.Name)
	return nil
}

// checkTargets fails when a rule jumps to a chain that does not exist.
func (t *FakeTable) checkTargets() error {
	for _, c := range t.Chains {
		for _, r := range c.Rules {
			if target := jumpTarget(r); target != "" && !isBuiltinTarget(target) && t.Chains[target] == nil {
				return fmt.Errorf("chain %s: rule %q jumps to missing chain %s", c.Name, r, target)
			}
		}
	}
	return nil
}

// jumpTarget returns the word after "-j" or "-g" in rule text.
func jumpTarget(rule string) string {
	words := SplitRule(rule)
	for i := 0; i+1 < len(words); i++ {
		if words[i] == "-j" || words[i] == "-g" {
			return words[i+1]
		}
	}
	return ""
}

var builtinTargets = []string{"ACCEPT", "DROP", "REJECT", "RETURN", "DNAT", "SNAT", "MASQUERADE",
	"MARK", "CONNMARK", "LOG", "NOTRACK", "CT", "REDIRECT", "TPROXY"}

func isBuiltinTarget(name string) bool { return slices.Contains(builtinTargets, name) }

// SplitRule splits rule text into words; a double-quoted string is one
// word, without its quotes.
func SplitRule(rule string) []string {
	var words []string
	for i := 0; i < len(rule); {
		switch {
		case rule[i] == ' ':
			i++
		case rule[i] == '"':
			j := strings.IndexByte(rule[i+1:], '"')
			if j < 0 {
				j = len(rule) - i - 1
			}
			words = append(words, rule[i+1:i+1+j])
			i += j + 2
		default:
			j := strings.IndexByte(rule[i:], ' ')
			if j < 0 {
				j = len(rule) - i
			}
			words = append(words, rule[i:i+j])
			i += j
		}
	}
	return words
}
