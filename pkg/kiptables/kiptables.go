// Package kiptables is a small client for the iptables tools: bulk changes
// go through iptables-restore (one atomic transaction per table), reads
// through iptables-save, and the few single-rule edits of built-in chains
// through github.com/coreos/go-iptables. It knows nothing about Kubernetes.
// Fake implements Interface in memory for tests.
package kiptables

import (
	"context"
	"errors"
	"io"
)

// Table names an iptables table.
type Table string

// The tables svcproxy uses.
const (
	TableFilter Table = "filter"
	TableNAT    Table = "nat"
	TableMangle Table = "mangle"
)

// Built-in chains.
const (
	ChainPrerouting  = "PREROUTING"
	ChainInput       = "INPUT"
	ChainForward     = "FORWARD"
	ChainOutput      = "OUTPUT"
	ChainPostrouting = "POSTROUTING"
)

// Interface is what a backend needs from iptables. Methods are safe to call
// from one goroutine at a time per value.
type Interface interface {
	// Restore runs iptables-restore --noflush --counters with data on
	// stdin: the concatenation of its chunks, which hold one or more
	// "*table ... COMMIT" sections; each table's section is applied
	// atomically, or not at all. Chunks let a caller pass the pieces it
	// rendered (10k services: ~35 MB) without copying them into one buffer.
	// An error wraps ErrNothingCommitted when the tool refused the input
	// before its first COMMIT: the kernel is as it was.
	Restore(ctx context.Context, data ...[]byte) error
	// RestoreFrom is Restore with the input that write writes, streamed to
	// the tool as it is written, so that a caller can render a large input
	// piece by piece instead of holding it. write may be called again (a
	// retry while another program holds the xtables lock) and must then
	// write the same input.
	RestoreFrom(ctx context.Context, write func(w io.Writer) error) error
	// Save returns iptables-save output for one table.
	Save(ctx context.Context, table Table) ([]byte, error)
	// ChainNames lists the chains of one table, built-in ones included.
	ChainNames(ctx context.Context, table Table) ([]string, error)
	// EnsureChain creates chain in table unless it exists.
	EnsureChain(ctx context.Context, table Table, chain string) error
	// ChainExists reports whether chain exists in table (on iptables-nft
	// without running a tool).
	ChainExists(ctx context.Context, table Table, chain string) (bool, error)
	// EnsureRuleAtFront inserts rule at the head of chain unless an
	// identical rule is already somewhere in chain.
	EnsureRuleAtFront(ctx context.Context, table Table, chain string, rule ...string) error
	// ListEnsuring runs one iptables-restore --noflush that, table by
	// table in the order given, creates each chain of Empty unless it
	// exists and lists the rules of each chain of List, which must exist
	// (built-in chains do). It returns each table's rules as iptables-save
	// prints them ("-A CHAIN ..."). An Empty chain that exists is flushed:
	// only chains nothing adds rules to belong there. On iptables-legacy
	// each table's COMMIT rewrites that table.
	ListEnsuring(ctx context.Context, req []ListRequest) (map[Table][]byte, error)
	// MissingChain runs one iptables tool that changes nothing and
	// returns the first of tables, in the order given, that lacks chain
	// ("" when each of them holds it).
	MissingChain(ctx context.Context, chain string, tables []Table) (Table, error)
	// DeleteRule deletes rule from chain; a missing rule or chain is not
	// an error.
	DeleteRule(ctx context.Context, table Table, chain string, rule ...string) error
	// Flavour is the iptables flavour driven ("" for fakes): the tools'
	// costs differ (see EnsureAtFront).
	Flavour() Flavour
}

// ListRequest is one table's part of a ListEnsuring run.
type ListRequest struct {
	Table Table
	Empty []string // chains to create unless they exist
	List  []string // chains whose rules are listed
}

// ErrLocked is wrapped by errors from an iptables tool that could not get
// the xtables lock in time, after retries.
var ErrLocked = errors.New("xtables lock held by another process")
