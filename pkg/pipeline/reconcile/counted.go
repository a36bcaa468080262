package reconcile

import "slices"

// The claims of a value-less kind (V of size zero: an address on a link,
// an ipset member, an nftables set element, a chain whose text is not
// kept). Every claim on a key wants the same, so who claims does not
// matter, only whether anyone does: a key's claims are counted in its
// entry (first.item), never kept one by one, and no key needs Table.more.
// Each owner keeps the positions of the entries it claims (claims.at),
// four bytes a claim, which its next Replace releases without hashing a
// key, as in a table with values.

// claimCounted claims items for the owner numbered id, whose claims were
// released. A key an owner names twice is counted twice, and released
// as often.
func (t *Table[O, K, V]) claimCounted(id ownerID, items []Item[K, V]) {
	at := slices.Grow(t.owners.byID[id].at[:0], len(items))
	for _, it := range items {
		pos := t.lookupOrAdd(it.Key)
		e := t.entries.at(pos)
		if e.flags&flagClaimed == 0 {
			e.flags |= flagClaimed
			t.claimed++
		}
		e.first.item++
		t.touch(pos, e)
		at = append(at, pos)
	}
	t.owners.byID[id].at = at
}

// uncount drops one claim on the entry at pos. The entry stays: it is
// dirty, and is removed only when a diff finds nothing left of it.
func (t *Table[O, K, V]) uncount(pos int32) {
	e := t.entries.at(pos)
	if e.first.item--; e.first.item == 0 {
		e.flags &^= flagClaimed
		t.claimed--
	}
	t.touch(pos, e)
}
