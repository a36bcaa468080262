// Package knft is the nftables backend's way to the kernel: it reads one
// table back and applies ordered transactions of object and element
// operations to it. Objects (table, chains, rules, set and map
// definitions) go through nft, which does the `typeof` work; elements go
// as netlink batches encoded here. See README.md for why, with numbers.
package knft

import (
	"context"
	"fmt"
	"iter"
	"strings"

	"sigs.k8s.io/knftables"
)

// Interface is what the backend needs from the kernel.
type Interface interface {
	// Exists reports whether the table is there.
	Exists(ctx context.Context) (bool, error)
	// ReadBack reports the table's chains, rule comments, sets and
	// elements to sink; a missing table reports nothing.
	ReadBack(ctx context.Context, sink Sink) error
	// Apply commits txs in order, each as one transaction or, when it
	// mixes objects and element runs, as several (each a prefix of it:
	// the caller orders units so that every unit boundary is consistent).
	// Each unit's Done runs once the kernel has it; on an error, the
	// units after the failing transaction have not been committed.
	Apply(ctx context.Context, txs [][]*Unit) (Stats, error)
	// Delete deletes the table; a missing table is not an error.
	Delete(ctx context.Context) error
	// Close releases what the Interface keeps between calls (the
	// Kernel's sockets). Calls after it still work, each with sockets
	// of its own.
	Close()
}

// Sink receives a read-back. Calls come from one goroutine.
type Sink interface {
	// Table: the table exists.
	Table()
	// Chain: a chain exists; hook is where a base chain is attached, the
	// zero ChainHook for a regular chain, nil when the reader cannot tell
	// (NewKnftables over the real nft, whose listings do not say).
	Chain(name string, hook *ChainHook)
	// Rule: the next rule of chain has comment ("": none) and names refs
	// (RuleRefs: the named sets, maps and chains it reads or jumps to;
	// nil when the reader cannot tell, as NewKnftables over the real nft).
	Rule(chain, comment string, refs []string)
	// Set: a set or map exists. Its elements are listed when Set returns
	// list: as data (elemdata.go) when as is not nil, else in nft's
	// spelling. Asked as data, a set of another layout lists none of
	// its elements (and an element that does not parse into the layout,
	// from a listing that does not tell the set's type, is left out):
	// the caller that declared the layout replaces such a set anyway,
	// and would have to parse what it cannot use. Set may come again for
	// a set whose elements are being listed: forget those, they are
	// listed again.
	Set(s SetInfo) (list bool, as *Layout)
	// Element is one element of a set, key and value as Set asked: data,
	// or nft's spelling (fields joined with " . "; the value is empty in
	// a set). Both alias a buffer that is reused once Element returns:
	// the Sink copies what it keeps.
	Element(set string, key, value []byte)
	// SetListed: every element of set has been reported.
	SetListed(set string)
}

// ChainHook is where a base chain is attached, as the kernel reports it;
// the zero ChainHook is a regular chain's. A base chain's hook and
// priority cannot be changed in place (the kernel refuses with
// EOPNOTSUPP), nor can a regular chain become a base chain or the other
// way round, so a reader compares them to decide whether the chain must
// be deleted and added again.
type ChainHook struct {
	Type     string // "filter", "nat", "route"
	Hook     string // "prerouting", "input", "forward", "output", "postrouting"
	Priority int
}

// Unit is operations that must be in one transaction, and what to do once
// they are committed. It is either objects (Objects) or a run of element
// changes of one set (Elems).
type Unit struct {
	// Objects adds the unit's operations to an nft transaction.
	Objects func(tx *knftables.Transaction)
	// Set, IsMap and Elems are a run of element changes.
	Set   string
	IsMap bool
	Elems iter.Seq[Change]
	// Layout, when not nil, says that Elems' keys and values are data
	// (the kernel's layout, elemdata.go) of a set declared so, not nft's
	// spelling; it spells them when they go through nft.
	Layout *Layout
	// Ops is how many operations the unit adds to a transaction.
	Ops int
	// Done records the unit as committed.
	Done func()
}

// Change is one element change: a delete of the key, an add of key and
// value, or both in that order (nft refuses to add a key that exists with
// another value). Key and Value are spelled as nft prints them, or data
// when the unit has a Layout.
type Change struct {
	Key, Value string
	Del, Add   bool
}

// Stats describes what one Apply sent.
type Stats struct {
	Transactions int
	Operations   int
	// NetlinkOps of the operations went as netlink element batches.
	NetlinkOps int
}

// ElemSep joins the fields of an element's key or value.
const ElemSep = " . "

// Write adds u's operations to tx in nft's form.
func (u *Unit) Write(tx *knftables.Transaction) error {
	if u.Objects != nil {
		u.Objects(tx)
	}
	if u.Elems == nil {
		return nil
	}
	var buf []byte
	for c := range u.Elems {
		key, value := c.Key, c.Value
		if u.Layout != nil {
			var keyEnd int
			var err error
			buf, keyEnd, err = u.Layout.l.spellData(buf[:0], []byte(key), []byte(value))
			if err != nil {
				return fmt.Errorf("element of %s: %w", u.Set, err)
			}
			key, value = string(buf[:keyEnd]), string(buf[keyEnd:])
		}
		if c.Del {
			tx.Delete(u.element(key, ""))
		}
		if c.Add {
			tx.Add(u.element(key, value))
		}
	}
	return nil
}

func (u *Unit) element(key, value string) *knftables.Element {
	el := &knftables.Element{Key: strings.Split(key, ElemSep)}
	if !u.IsMap {
		el.Set = u.Set
		return el
	}
	el.Map = u.Set
	if value != "" {
		el.Value = strings.Split(value, ElemSep)
	}
	return el
}

// Layout is how a set's elements are laid out in the kernel, to make and
// spell their data (elemdata.go).
type Layout struct{ l *layout }

// DeclaredLayout is the layout of a set or map declared with typ or
// typeOf (nft's type names or typeof expressions) and flags, or nil when
// knft does not know the types.
func DeclaredLayout(typ, typeOf string, flags []knftables.SetFlag, isMap bool) *Layout {
	l := declLayout(typ, typeOf, flags, isMap)
	if l == nil {
		return nil
	}
	return &Layout{l}
}

// KeyLen is the length of a key's data.
func (l *Layout) KeyLen() int { return l.l.keyDataLen() }

// layout is l's, nil for nil (spelled elements).
func (l *Layout) layout() *layout {
	if l == nil {
		return nil
	}
	return l.l
}

// SpellKey is key, data, spelled as nft prints it (messages, tests).
func (l *Layout) SpellKey(key string) string {
	var buf [4 * maxDataLen]byte // one allocation: the string
	b, keyEnd, err := l.l.spellData(buf[:0], []byte(key), nil)
	if err != nil {
		return fmt.Sprintf("%x", key)
	}
	return string(b[:keyEnd])
}

// SpellElem is key and value, data, spelled as nft prints them (an
// element written with objects through nft; messages, tests).
func (l *Layout) SpellElem(key, value string) (string, string, error) {
	b, keyEnd, err := l.l.spellData(nil, []byte(key), []byte(value))
	if err != nil {
		return "", "", err
	}
	return string(b[:keyEnd]), string(b[keyEnd:]), nil
}
