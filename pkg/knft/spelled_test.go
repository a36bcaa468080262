package knft

// appendElem appends one NFTA_LIST_ELEM for key (and value, for a map),
// spelled, to b: its data, parsed, then encoded as the netlink writer
// encodes data. withValue is false for deletes, which name the key only.
// The tests write elements as nft spells them; the product sends data.
func (l *layout) appendElem(b []byte, key, value string, withValue bool) ([]byte, error) {
	var kb, vb [2 * maxDataLen]byte
	k, err := l.parseKey(kb[:0], key)
	if err != nil {
		return b, err
	}
	var v []byte
	if withValue {
		if v, err = l.parseValue(vb[:0], value); err != nil {
			return b, err
		}
	}
	return l.appendElemData(b, k, v, withValue)
}
