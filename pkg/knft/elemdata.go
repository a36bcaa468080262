package knft

import (
	"fmt"
	"slices"

	"github.com/svcproxy/svcproxy/pkg/knetlink"
)

// An element's data is its key and value as the kernel holds them: the
// bytes of NFTA_DATA_VALUE, the fields of a concatenation each padded to
// 4 bytes (an address in network byte order, a protocol number, a port in
// network byte order, a numgen slot in host byte order). An interval
// set's key is the range's first key followed by its inclusive last one.
// A verdict is not data (it names a chain): a verdict map's value stays
// spelled ("goto x", "drop"). A catch-all element has no key: its key's
// data is empty, spelled "*". Data is comparable as a string and costs no
// parsing on the way to netlink (appendElemData) or back (decodeData);
// nft's spelling is made from it only where text is needed (spellData:
// nft's transactions, the fake's table, messages).

// catchAllKey is how nft spells a catch-all element's key.
const catchAllKey = "*"

// maxDataLen is the kernel's bound on one key or value
// (NFT_DATA_VALUE_MAXLEN).
const maxDataLen = 64

// fieldsLen is the length of the data of fs.
func fieldsLen(fs []field) int {
	if len(fs) == 1 {
		return fs[0].len
	}
	n := 0
	for _, f := range fs {
		n += knetlink.Align(f.len)
	}
	return n
}

// paddedZero reports whether the padding of every field of data, a
// concatenation of fs, is zero: the kernel compares whole registers, so
// a key with padding set would match no packet and spell as another key
// (found by FuzzElemData).
func paddedZero(fs []field, data []byte) bool {
	if len(fs) == 1 {
		return true
	}
	off := 0
	for _, f := range fs {
		for _, c := range data[off+f.len : off+knetlink.Align(f.len)] {
			if c != 0 {
				return false
			}
		}
		off += knetlink.Align(f.len)
	}
	return true
}

// validKey reports whether key is data of l's key: its length, and its
// padding zero (both ends of an interval's).
func (l *layout) validKey(key []byte) bool {
	if len(key) != l.keyDataLen() {
		return false
	}
	if l.interval {
		n := len(key) / 2
		return paddedZero(l.key, key[:n]) && paddedZero(l.key, key[n:])
	}
	return paddedZero(l.key, key)
}

// keyDataLen is the length of a key's data: twice the key's for an
// interval set (first and last key).
func (l *layout) keyDataLen() int {
	if l.interval {
		return 2 * fieldsLen(l.key)
	}
	return fieldsLen(l.key)
}

// spellData appends key and value, data, spelled as nft prints them;
// the key ends at keyEnd. An empty value (a delete's) stays empty.
func (l *layout) spellData(dst, key, value []byte) (out []byte, keyEnd int, err error) {
	if len(key) != l.keyDataLen() && len(key) != 0 {
		return dst, 0, fmt.Errorf("key of %d bytes, want %d: %w", len(key), l.keyDataLen(), errUndecodable)
	}
	var end []byte
	if l.interval {
		key, end = key[:len(key)/2], key[len(key)/2:]
	}
	start := len(dst)
	if len(key) == 0 {
		dst = append(dst, catchAllKey...)
	} else if dst, err = spellFields(dst, l.key, key, end); err != nil {
		return dst[:start], 0, err
	}
	keyEnd = len(dst)
	switch {
	case len(value) == 0: // a delete names the key only
	case l.verdict:
		dst = append(dst, value...)
	case l.data != nil:
		if len(value) != fieldsLen(l.data) {
			return dst[:start], 0, fmt.Errorf("value of %d bytes: %w", len(value), errUndecodable)
		}
		dst, err = spellFields(dst, l.data, value, nil)
	}
	if err != nil {
		return dst[:start], 0, err
	}
	return dst, keyEnd, nil
}

// same reports whether l and o lay elements out alike: their data is
// the same bytes for the same element.
func (l *layout) same(o *layout) bool {
	return slices.Equal(l.key, o.key) && slices.Equal(l.data, o.data) &&
		l.verdict == o.verdict && l.interval == o.interval
}
