package kiptables

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
)

// Fake is an in-memory Interface. Restore parses iptables-restore input
// with --noflush semantics (a ":CHAIN" line creates or flushes the chain,
// "-A" appends, "-I" without a rule number inserts at the front, "-X"
// deletes an empty, unreferenced chain) and checks that
// every jump target exists at COMMIT, as the real tool does; each table
// section commits on its own, so a failure in a later section leaves the
// earlier ones applied.
type Fake struct {
	mu     sync.Mutex
	tables map[Table]*FakeTable

	// Restores holds the input of every Restore call, failed ones included.
	Restores [][]byte
	// SaveCalls counts Save calls per table.
	SaveCalls map[Table]int
	// RestoreHook, if set, runs before each Restore is applied; an error
	// it returns fails that Restore with nothing applied.
	RestoreHook func(data []byte) error
}

// FakeTable is one table of a Fake.
type FakeTable struct {
	Name   Table
	Chains map[string]*FakeChain
}

// FakeChain is one chain: its rules are the text after "-A <chain> ".
type FakeChain struct {
	Name    string
	Builtin bool
	Rules   []string
}

var _ Interface = (*Fake)(nil)

var builtinChains = map[Table][]string{
	TableFilter: {ChainInput, ChainForward, ChainOutput},
	TableNAT:    {ChainPrerouting, ChainInput, ChainOutput, ChainPostrouting},
	TableMangle: {ChainPrerouting, ChainInput, ChainForward, ChainOutput, ChainPostrouting},
}

// NewFake returns a Fake holding the empty filter, nat and mangle tables.
func NewFake() *Fake {
	f := &Fake{tables: map[Table]*FakeTable{}, SaveCalls: map[Table]int{}}
	for name, chains := range builtinChains {
		t := &FakeTable{Name: name, Chains: map[string]*FakeChain{}}
		for _, c := range chains {
			t.Chains[c] = &FakeChain{Name: c, Builtin: true}
		}
		f.tables[name] = t
	}
	return f
}

// Table returns a copy of a table's current contents (nil if unknown).
func (f *Fake) Table(name Table) *FakeTable {
	f.mu.Lock()
	defer f.mu.Unlock()
	if t := f.tables[name]; t != nil {
		return t.clone()
	}
	return nil
}

func (t *FakeTable) clone() *FakeTable {
	c := &FakeTable{Name: t.Name, Chains: make(map[string]*FakeChain, len(t.Chains))}
	for name, ch := range t.Chains {
		c.Chains[name] = &FakeChain{Name: ch.Name, Builtin: ch.Builtin, Rules: slices.Clone(ch.Rules)}
	}
	return c
}

// Restore is part of Interface.
func (f *Fake) Restore(_ context.Context, chunks ...[]byte) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	data := bytes.Join(chunks, nil)
	f.Restores = append(f.Restores, data)
	if f.RestoreHook != nil {
		if err := f.RestoreHook(data); err != nil {
			return err
		}
	}
	return f.restore(string(data))
}

// RestoreFrom is part of Interface: Restore of what write writes.
func (f *Fake) RestoreFrom(ctx context.Context, write func(w io.Writer) error) error {
	var b bytes.Buffer
	if err := write(&b); err != nil {
		return err
	}
	return f.Restore(ctx, b.Bytes())
}

// Save is part of Interface: the table in iptables-save format (chains
// and rules in Dump's order, zero counters).
func (f *Fake) Save(_ context.Context, table Table) ([]byte, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.SaveCalls[table]++
	t := f.tables[table]
	if t == nil {
		return nil, fmt.Errorf("iptables-save: table %q does not exist", table)
	}
	var b strings.Builder
	t.write(&b)
	return []byte(b.String()), nil
}

// Dump returns every table with at least one user chain or rule, in
// iptables-save format without counters; chains are ordered built-in
// first, then by name, so dumps are stable for golden files.
func (f *Fake) Dump() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var b strings.Builder
	for _, name := range []Table{TableFilter, TableNAT, TableMangle} {
		if t := f.tables[name]; !t.empty() {
			t.write(&b)
		}
	}
	return b.String()
}

func (t *FakeTable) empty() bool {
	for _, c := range t.Chains {
		if !c.Builtin || len(c.Rules) > 0 {
			return false
		}
	}
	return true
}

func (t *FakeTable) write(b *strings.Builder) {
	names := t.chainNames()
	b.WriteString("*" + string(t.Name) + "\n")
	for _, name := range names {
		if c := t.Chains[name]; c.Builtin {
			b.WriteString(":" + name + " ACCEPT [0:0]\n")
		} else {
			b.WriteString(":" + name + " - [0:0]\n")
		}
	}
	for _, name := range names {
		for _, r := range t.Chains[name].Rules {
			b.WriteString("-A " + name + " " + r + "\n")
		}
	}
	b.WriteString("COMMIT\n")
}

// chainNames lists built-in chains in kernel order, then the rest by name.
func (t *FakeTable) chainNames() []string {
	names := slices.Clone(builtinChains[t.Name])
	var user []string
	for name, c := range t.Chains {
		if !c.Builtin {
			user = append(user, name)
		}
	}
	slices.Sort(user)
	return append(names, user...)
}

// EnsureChain is part of Interface.
func (f *Fake) EnsureChain(_ context.Context, table Table, chain string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	t, err := f.table(table)
	if err != nil {
		return err
	}
	if t.Chains[chain] == nil {
		t.Chains[chain] = &FakeChain{Name: chain}
	}
	return nil
}

// ChainExists is part of Interface.
func (f *Fake) ChainExists(_ context.Context, table Table, chain string) (bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	t, err := f.table(table)
	if err != nil {
		return false, err
	}
	return t.Chains[chain] != nil, nil
}

// EnsureRuleAtFront is part of Interface.
func (f *Fake) EnsureRuleAtFront(_ context.Context, table Table, chain string, rule ...string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	c, err := f.chain(table, chain)
	if err != nil {
		return err
	}
	text := JoinArgs(rule)
	if slices.Contains(c.Rules, text) {
		return nil
	}
	if target := jumpTarget(text); target != "" && !isBuiltinTarget(target) && f.tables[table].Chains[target] == nil {
		return fmt.Errorf("iptables: chain %s/%s: no chain/target/match by that name", table, target)
	}
	c.Rules = append([]string{text}, c.Rules...)
	return nil
}

// ListEnsuring is part of Interface. As the tool, it applies each
// table's part on its own, in order, and fails on a listed chain that
// does not exist.
func (f *Fake) ListEnsuring(_ context.Context, req []ListRequest) (map[Table][]byte, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := map[Table][]byte{}
	for _, r := range req {
		t, err := f.table(r.Table)
		if err != nil {
			return nil, err
		}
		for _, name := range r.Empty {
			t.Chains[name] = &FakeChain{Name: name}
		}
		for _, name := range r.List {
			c := t.Chains[name]
			if c == nil {
				return nil, fmt.Errorf("iptables-restore: chain %s/%s: no chain/target/match by that name", r.Table, name)
			}
			for _, rule := range c.Rules {
				out[r.Table] = append(out[r.Table], "-A "+name+" "+rule+"\n"...)
			}
		}
	}
	return out, nil
}

// MissingChain is part of Interface.
func (f *Fake) MissingChain(_ context.Context, chain string, tables []Table) (Table, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, name := range tables {
		t, err := f.table(name)
		if err != nil {
			return "", err
		}
		if t.Chains[chain] == nil {
			return name, nil
		}
	}
	return "", nil
}

// ChainNames is part of Interface.
func (f *Fake) ChainNames(_ context.Context, table Table) ([]string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	t, err := f.table(table)
	if err != nil {
		return nil, err
	}
	return t.chainNames(), nil
}

// Flavour is part of Interface: a Fake has none, so EnsureAtFront checks
// with Save as on iptables-legacy.
func (f *Fake) Flavour() Flavour { return "" }

// DeleteRule is part of Interface.
func (f *Fake) DeleteRule(_ context.Context, table Table, chain string, rule ...string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	c, err := f.chain(table, chain)
	if err != nil {
		return nil // a missing chain has no rule to delete
	}
	if i := slices.Index(c.Rules, JoinArgs(rule)); i >= 0 {
		c.Rules = slices.Delete(c.Rules, i, i+1)
	}
	return nil
}

// DeleteChain removes a chain outright, as an outside actor (firewalld, an
// admin) might; tests use it to simulate a flush.
func (f *Fake) DeleteChain(table Table, chain string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if t := f.tables[table]; t != nil {
		delete(t.Chains, chain)
	}
}

func (f *Fake) table(name Table) (*FakeTable, error) {
	t := f.tables[name]
	if t == nil {
		return nil, fmt.Errorf("iptables: table %q does not exist", name)
	}
	return t, nil
}

func (f *Fake) chain(table Table, chain string) (*FakeChain, error) {
	t, err := f.table(table)
	if err != nil {
		return nil, err
	}
	c := t.Chains[chain]
	if c == nil {
		return nil, fmt.Errorf("iptables: chain %s/%s does not exist", table, chain)
	}
	return c, nil
}

// JoinArgs turns argv words into rule text as iptables-restore input and
// iptables-save output spell it: words with spaces are double-quoted.
func JoinArgs(args []string) string {
	var b strings.Builder
	for i, a := range args {
		if i > 0 {
			b.WriteByte(' ')
		}
		if strings.ContainsAny(a, " \t") {
			b.WriteString(`"` + a + `"`)
		} else {
			b.WriteString(a)
		}
	}
	return b.String()
}
