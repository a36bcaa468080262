package kiptables

import (
	"context"
	"errors"
	"fmt"
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

// ChainExists is part of Interface. On iptables-nft it runs no tool: the
// kernel is asked over netlink (nftChainExists).
func (c *Client) ChainExists(ctx context.Context, table Table, chain string) (bool, error) {
	if c.flavour == FlavourNFT {
		ok, err := nftChainExists(c.family, table, chain)
		if err != nil {
			return false, fmt.Errorf("checking chain %s/%s: %w", table, chain, err)
		}
		return ok, nil
	}
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
