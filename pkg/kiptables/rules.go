package kiptables

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"

	goiptables "github.com/coreos/go-iptables/iptables"
)

// The single-rule operations go through go-iptables, which takes no
// context; a full sync makes one only for what is missing (EnsureAtFront),
// and they are short. Like the restore path they retry while the xtables
// lock is busy.

// EnsureChain is part of Interface.
func (c *Client) EnsureChain(ctx context.Context, table Table, chain string) error {
	ok, err := c.ChainExists(ctx, table, chain)
	if err != nil || ok {
		return err
	}
	err = c.retryLocked(ctx, "iptables", func() error { return c.rules.NewChain(string(table), chain) })
	if err != nil && !isExists(err) {
		return fmt.Errorf("creating chain %s/%s: %w", table, chain, err)
	}
	return nil
}

// ChainExists is part of Interface.
func (c *Client) ChainExists(ctx context.Context, table Table, chain string) (bool, error) {
	var ok bool
	err := c.retryLocked(ctx, "iptables", func() error {
		var err error
		ok, err = c.rules.ChainExists(string(table), chain)
		return err
	})
	if err != nil {
		return false, fmt.Errorf("checking chain %s/%s: %w", table, chain, err)
	}
	return ok, nil
}

// EnsureRuleAtFront is part of Interface.
func (c *Client) EnsureRuleAtFront(ctx context.Context, table Table, chain string, rule ...string) error {
	err := c.retryLocked(ctx, "iptables", func() error { return c.rules.InsertUnique(string(table), chain, 1, rule...) })
	if err != nil {
		return fmt.Errorf("ensuring rule in %s/%s (%s): %w", table, chain, strings.Join(rule, " "), err)
	}
	return nil
}

// DeleteRule is part of Interface.
func (c *Client) DeleteRule(ctx context.Context, table Table, chain string, rule ...string) error {
	err := c.retryLocked(ctx, "iptables", func() error { return c.rules.DeleteIfExists(string(table), chain, rule...) })
	if err != nil && !isNotExist(err) {
		return fmt.Errorf("deleting rule from %s/%s (%s): %w", table, chain, strings.Join(rule, " "), err)
	}
	return nil
}

func isNotExist(err error) bool {
	var e *goiptables.Error
	return errors.As(err, &e) && e.IsNotExist()
}

func isExists(err error) bool {
	return err != nil && strings.Contains(err.Error(), "already exists")
}

// ListEnsuring is part of Interface. The tool prints each listed chain's
// rules ("-S CHAIN") after a line naming the chain ("-P CHAIN POLICY" for
// a built-in chain, "-N CHAIN" for another), which tells one table's
// OUTPUT from another's.
func (c *Client) ListEnsuring(ctx context.Context, req []ListRequest) (map[Table][]byte, error) {
	var in bytes.Buffer
	for _, r := range req {
		in.WriteString("*" + string(r.Table) + "\n")
		for _, chain := range r.Empty {
			in.WriteString(":" + chain + " - [0:0]\n")
		}
		for _, chain := range r.List {
			in.WriteString("-S " + chain + "\n")
		}
		in.WriteString("COMMIT\n")
	}
	var out bytes.Buffer
	stdin := func(w io.Writer) error {
		_, err := w.Write(in.Bytes())
		return err
	}
	args := append(append([]string{}, lockArgs...), "--noflush")
	err := c.runRetrying(ctx, c.restore, args, stdin, func() io.Writer {
		out.Reset()
		return &out
	})
	if err != nil {
		return nil, fmt.Errorf("listing the built-in chains: %w", err)
	}
	return splitListing(out.Bytes(), req)
}

// splitListing assigns each rule of the tool's -S output to the table of
// the chain listed.
func splitListing(out []byte, req []ListRequest) (map[Table][]byte, error) {
	type listed struct {
		table Table
		chain string
	}
	var order []listed
	for _, r := range req {
		for _, chain := range r.List {
			order = append(order, listed{r.Table, chain})
		}
	}
	res := map[Table][]byte{}
	k := -1
	for rest := out; len(rest) > 0; {
		var line []byte
		line, rest, _ = bytes.Cut(rest, []byte("\n"))
		if bytes.HasPrefix(line, []byte("-P ")) || bytes.HasPrefix(line, []byte("-N ")) {
			k++
			name, _, _ := bytes.Cut(line[3:], []byte(" "))
			if k >= len(order) || string(name) != order[k].chain {
				return nil, fmt.Errorf("unexpected listing line %q", line)
			}
			continue
		}
		if k < 0 || len(line) == 0 {
			return nil, fmt.Errorf("unexpected listing line %q", line)
		}
		res[order[k].table] = append(append(res[order[k].table], line...), '\n')
	}
	if k+1 != len(order) {
		return nil, fmt.Errorf("listed %d chains of %d", k+1, len(order))
	}
	return res, nil
}
