package knft

import (
	"context"

	"sigs.k8s.io/knftables"

	"github.com/svcproxy/svcproxy/pkg/knetlink"
)

// Knftables is an Interface that reaches the table through a
// knftables.Interface: read back with its listings, transactions in its
// text. Over knftables.NewFake it is the unit tests' fake (NewFake); over
// the real nft it is the alternative Kernel was measured against
// (NewKnftables; README.md).
type Knftables struct {
	nft knftables.Interface
	// table, when set, is the knftables.Fake behind nft: element runs of
	// the sets it declares are then encoded to netlink and decoded back
	// by the Kernel's code, as one batch each, in Apply's split.
	table *knftables.Fake
}

// NewFake returns a fake Interface over table (knftables.NewFake(family,
// name)). It runs the production Apply path: runs of element changes are
// split from the objects as the Kernel splits them, encoded by the
// Kernel's netlink encoder and decoded back by its read-back decoder (the
// set layouts come from table's declarations), and what the decoder spells
// is what table gets. nft, when not nil, commits the transactions instead
// of table itself (a wrapper of table that refuses more).
func NewFake(table *knftables.Fake, nft knftables.Interface) *Knftables {
	if nft == nil {
		nft = table
	}
	return &Knftables{nft: nft, table: table}
}

// NewKnftables returns an Interface that does everything through nft:
// one command per element (knftables' own text), read-back through its
// JSON listings. Nothing in production uses it: it is what the Kernel is
// measured against (README.md).
func NewKnftables(nft knftables.Interface) *Knftables { return &Knftables{nft: nft} }

// Exists is part of Interface.
func (k *Knftables) Exists(ctx context.Context) (bool, error) {
	_, err := k.nft.List(ctx, "chains")
	if knftables.IsNotFound(err) {
		return false, nil
	}
	return err == nil, err
}

// ReadBack is part of Interface.
func (k *Knftables) ReadBack(ctx context.Context, sink Sink) error {
	if k.table == nil {
		return readBackKnftables(ctx, k.nft, nil, sink)
	}
	return readBackKnftables(ctx, k.nft, fakeDecls{k.table}, sink)
}

// fakeDecls reads the declarations of the fake's table as the kernel would
// report them.
type fakeDecls struct{ table *knftables.Fake }

// hook is where the fake table declares chain (the priority as a number).
func (d fakeDecls) hook(chain string) *ChainHook {
	d.table.RLock()
	defer d.table.RUnlock()
	t := d.table.Table
	if t == nil || t.Chains[chain] == nil {
		return nil
	}
	c := t.Chains[chain]
	if c.Hook == nil {
		return &ChainHook{}
	}
	h := &ChainHook{Hook: string(*c.Hook)}
	if c.Type != nil {
		h.Type = string(*c.Type)
	}
	if c.Priority != nil {
		h.Priority, _ = knftables.ParsePriority(t.Family, string(*c.Priority))
	}
	return h
}

// setType is the type the kernel reports for set as the fake table
// declares it.
func (d fakeDecls) setType(set string) *SetType {
	d.table.RLock()
	defer d.table.RUnlock()
	t := d.table.Table
	var typ SetType
	var ok bool
	switch {
	case t == nil:
	case t.Sets[set] != nil:
		s := t.Sets[set].Set
		typ, ok = DeclaredType(s.Type, s.TypeOf, s.Flags, false, s.Timeout)
	case t.Maps[set] != nil:
		m := t.Maps[set].Map
		typ, ok = DeclaredType(m.Type, m.TypeOf, m.Flags, true, m.Timeout)
	}
	if !ok {
		return nil
	}
	return &typ
}

// Apply is part of Interface.
func (k *Knftables) Apply(ctx context.Context, txs [][]*Unit) (Stats, error) {
	c := &committer{ctx: ctx, nft: k.nft, run: k.nft.Run}
	if k.table != nil {
		c.ew = &fakeWriter{k: k, ctx: ctx, layouts: map[string]*layout{}}
	}
	return c.apply(txs)
}

// Close is part of Interface: a Knftables keeps nothing open.
func (k *Knftables) Close() {}

// Delete is part of Interface.
func (k *Knftables) Delete(ctx context.Context) error { return deleteTable(ctx, k.nft) }

// fakeWriter is the Fake's elemWriter: a batch is encoded as the netlink
// writer encodes it, decoded back, and committed to the fake as one nft
// transaction.
type fakeWriter struct {
	k       *Knftables
	ctx     context.Context
	layouts map[string]*layout
	tx      *knftables.Transaction // the batch encodeRun made
	err     error                  // the verdict on the batch start sent
}

func (w *fakeWriter) nftRan() { clear(w.layouts) }

func (w *fakeWriter) canWrite(u *Unit) bool {
	return u.Elems != nil && u.Objects == nil && u.Layout != nil && w.layout(u.Set) != nil
}

func (w *fakeWriter) encodeRun(us []*Unit) int {
	w.tx = w.k.nft.NewTransaction()
	n := 0
	for ; n < len(us) && w.canWrite(us[n]); n++ {
		decoded, ok := w.roundTrip(us[n])
		if !ok {
			break
		}
		_ = decoded.Write(w.tx) // spelled: nothing to fail
	}
	return n
}

// roundTrip encodes u's changes and decodes them back, all or none.
func (w *fakeWriter) roundTrip(u *Unit) (*Unit, bool) {
	l := w.layout(u.Set)
	keyOnly := *l
	keyOnly.verdict, keyOnly.data = false, nil
	var out []Change
	for c := range u.Elems {
		d := Change{Del: c.Del, Add: c.Add}
		if c.Del {
			k, _, ok := w.encodeDecode(&keyOnly, c.Key, "", false)
			if !ok {
				return nil, false
			}
			d.Key = k
		}
		if c.Add {
			var ok bool
			if d.Key, d.Value, ok = w.encodeDecode(l, c.Key, c.Value, true); !ok {
				return nil, false
			}
		}
		out = append(out, d)
	}
	seq := func(yield func(Change) bool) {
		for _, c := range out {
			if !yield(c) {
				return
			}
		}
	}
	return &Unit{Set: u.Set, IsMap: u.IsMap, Elems: seq}, true
}

// encodeDecode encodes one element, data, as the netlink writer does and
// decodes it back, spelled.
func (w *fakeWriter) encodeDecode(l *layout, key, value string, withValue bool) (string, string, bool) {
	b, err := l.appendElemData(nil, []byte(key), []byte(value), withValue)
	if err != nil {
		return "", "", false
	}
	a := knetlink.Attrs{B: b}
	_, elem, _ := a.Next()
	k, v, err := l.decode(elem)
	return k, v, err == nil
}

func (w *fakeWriter) start()      { w.err = w.k.nft.Run(w.ctx, w.tx) }
func (w *fakeWriter) wait() error { err := w.err; w.err = nil; return err }

// layout is set's layout as the kernel would report it for the fake's
// declaration, or nil (absent, or not something the encoder spells).
func (w *fakeWriter) layout(set string) *layout {
	if l, ok := w.layouts[set]; ok {
		return l
	}
	var l *layout
	if t := w.k.table.Table; t != nil {
		if s := t.Sets[set]; s != nil {
			l = declLayout(s.Type, s.TypeOf, s.Flags, false)
		} else if m := t.Maps[set]; m != nil {
			l = declLayout(m.Type, m.TypeOf, m.Flags, true)
		}
	}
	w.layouts[set] = l
	return l
}
