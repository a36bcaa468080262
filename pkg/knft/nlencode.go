package knft

import (
	"encoding/binary"
	"fmt"
	"net/netip"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/svcproxy/svcproxy/pkg/knetlink"
)

// The encoder is the decoder's (nldecode.go) inverse. An element goes to
// the kernel as its data (elemdata.go: key and value in the kernel's
// layout), which appendElemData copies into the netlink attributes of one
// NFTA_LIST_ELEM after checking its length against the set's layout. A
// change in nft's spelling (fields joined with " . ") is parsed into data
// first (parseKey, parseValue): anything that does not parse exactly
// returns an error, and the caller sends that element through nft instead.

// appendElem appends one NFTA_LIST_ELEM for key (and value, for a map),
// spelled, to b. withValue is false for deletes, which name the key only.
func (l *layout) appendElem(b []byte, key, value string, withValue bool) ([]byte, error) {
	return l.appendElemWith(b, key, value, withValue, nil)
}

// appendElemWith is appendElem with the key's leading fields taken from
// prefix when they are the ones it last parsed (prefix may be nil).
func (l *layout) appendElemWith(b []byte, key, value string, withValue bool, prefix *keyPrefix) ([]byte, error) {
	var kb, vb [2 * maxDataLen]byte
	k, err := l.parseKeyWith(kb[:0], key, prefix)
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

// parseKeyWith is parseKey, with a concatenation's leading fields from
// prefix when they are the ones it last parsed (prefix may be nil).
func (l *layout) parseKeyWith(dst []byte, key string, prefix *keyPrefix) ([]byte, error) {
	if prefix != nil && len(l.key) > 1 && !l.interval {
		return prefix.encode(dst, l, key)
	}
	return l.parseKey(dst, key)
}

// appendElemData appends one NFTA_LIST_ELEM for key and value, as data
// (a verdict map's value spelled), to b. withValue is false for deletes,
// which name the key only.
func (l *layout) appendElemData(b, key, value []byte, withValue bool) ([]byte, error) {
	if !l.validKey(key) {
		// Lengths only: formatting key would move every caller's
		// buffer to the heap.
		return b, fmt.Errorf("key of %d bytes: not data of %d bytes: %w", len(key), l.keyDataLen(), errUndecodable)
	}
	start := len(b)
	b = knetlink.NestStart(b, unix.NFTA_LIST_ELEM)
	b = l.appendKey(b, key)
	if withValue && (l.verdict || l.data != nil) {
		d := len(b)
		b = knetlink.NestStart(b, unix.NFTA_SET_ELEM_DATA)
		var err error
		if l.verdict {
			b, err = appendVerdict(b, string(value))
		} else if len(value) != fieldsLen(l.data) || !paddedZero(l.data, value) {
			err = fmt.Errorf("value of %d bytes: not data of %d bytes: %w", len(value), fieldsLen(l.data), errUndecodable)
		} else {
			b = knetlink.AppendAttr(b, unix.NFTA_DATA_VALUE, value)
		}
		if err != nil {
			return b[:start], err
		}
		knetlink.NestEnd(b, d)
	}
	knetlink.NestEnd(b, start)
	return b, nil
}

// appendKey appends NFTA_SET_ELEM_KEY and, for an interval set,
// NFTA_SET_ELEM_KEY_END (the second half of key).
func (l *layout) appendKey(b []byte, key []byte) []byte {
	var end []byte
	if l.interval {
		key, end = key[:len(key)/2], key[len(key)/2:]
	}
	n := len(b)
	b = knetlink.AppendAttr(knetlink.NestStart(b, unix.NFTA_SET_ELEM_KEY), unix.NFTA_DATA_VALUE, key)
	knetlink.NestEnd(b, n)
	if l.interval {
		n = len(b)
		b = knetlink.AppendAttr(knetlink.NestStart(b, nftaSetElemKeyEnd), unix.NFTA_DATA_VALUE, end)
		knetlink.NestEnd(b, n)
	}
	return b
}

// keyPrefix remembers the encoding of the fields before the last one of
// the last concatenated key it encoded. An endpoint map's elements come
// slot after slot of one frontend (address . protocol . port . slot), so
// with it each slot's key costs parsing its slot number only; at
// 50k Services × 10 endpoints that is 500k keys of 550k.
type keyPrefix struct {
	layout  *layout
	spelled string // the fields before the last, as spelled
	encoded []byte
}

// encode appends key, a concatenation of l's fields (not ranges), to dst.
func (p *keyPrefix) encode(dst []byte, l *layout, key string) ([]byte, error) {
	i := strings.LastIndex(key, ElemSep)
	if i < 0 {
		return nil, fmt.Errorf("element %q: want %d fields: %w", key, len(l.key), errUndecodable)
	}
	head, last := key[:i], key[i+len(ElemSep):]
	n := len(l.key) - 1
	if p.layout != l || p.spelled != head {
		enc, _, err := encodeConcat(p.encoded[:0], nil, l.key[:n], head, false)
		if err != nil {
			p.layout = nil
			return nil, err
		}
		p.layout, p.spelled, p.encoded = l, head, enc
	}
	dst, _, err := encodeConcat(append(dst, p.encoded...), nil, l.key[n:], last, false)
	return dst, err
}

// encodeFields appends s, fields joined with " . ", to dst: in a
// concatenation every field is padded to 4 bytes. With interval it also
// appends the range's inclusive end to end (a field without a range ends
// where it starts).
func encodeFields(dst, end []byte, fs []field, s string, interval bool) ([]byte, []byte, error) {
	if len(fs) > 1 {
		return encodeConcat(dst, end, fs, s, interval)
	}
	return encodeSome(dst, end, fs, s, interval, false)
}

// encodeConcat is encodeFields for fields of a concatenation, padded
// whatever their number (keyPrefix encodes a concatenation in two pieces).
func encodeConcat(dst, end []byte, fs []field, s string, interval bool) ([]byte, []byte, error) {
	return encodeSome(dst, end, fs, s, interval, true)
}

func encodeSome(dst, end []byte, fs []field, s string, interval, concat bool) ([]byte, []byte, error) {
	rest := s
	for i, f := range fs {
		part, next, found := strings.Cut(rest, " . ")
		if found == (i == len(fs)-1) {
			return nil, nil, fmt.Errorf("element %q: want %d fields: %w", s, len(fs), errUndecodable)
		}
		rest = next
		n, m := len(dst), len(end)
		var err error
		if dst, end, err = appendField(dst, end, f, part, interval); err != nil {
			return nil, nil, fmt.Errorf("element %q: %w", s, err)
		}
		if concat {
			for pad := knetlink.Align(f.len) - f.len; pad > 0; pad-- {
				dst = append(dst, 0)
				if interval {
					end = append(end, 0)
				}
			}
		}
		// A range's two ends must be the field's size (a port range
		// "80-90" in a protocol field is not).
		if interval && len(end)-m != len(dst)-n {
			return nil, nil, fmt.Errorf("element %q: field %q: %w", s, part, errUndecodable)
		}
	}
	return dst, end, nil
}

// appendField appends one field to lo, and to hi its range end (interval
// only: "a-b", or a prefix for an address; a single value ends where it
// starts).
func appendField(lo, hi []byte, f field, s string, interval bool) ([]byte, []byte, error) {
	if interval {
		if a, b, ok := strings.Cut(s, "-"); ok {
			lo, _, err := appendField(lo, nil, f, a, false)
			if err == nil {
				hi, _, err = appendField(hi, nil, f, b, false)
			}
			return lo, hi, err
		}
		if (f.typ == typeIPAddr || f.typ == typeIP6Addr) && strings.Contains(s, "/") {
			a, b, err := encodePrefix(f, s)
			return append(lo, a...), append(hi, b...), err
		}
	}
	n := len(lo)
	switch f.typ {
	case typeIPAddr, typeIP6Addr:
		a, err := netip.ParseAddr(s)
		if err != nil || a.BitLen()/8 != f.len || a.Zone() != "" {
			return lo, hi, fmt.Errorf("address %q: %w", s, errUndecodable)
		}
		if a.Is4() {
			b := a.As4()
			lo = append(lo, b[:]...)
		} else {
			b := a.As16()
			lo = append(lo, b[:]...)
		}
	case typeInetProto:
		p, err := protoNumber(s)
		if err != nil {
			return lo, hi, err
		}
		lo = append(lo, p)
	case typeInetService:
		v, err := strconv.ParseUint(s, 10, 16)
		if err != nil {
			return lo, hi, fmt.Errorf("port %q: %w", s, errUndecodable)
		}
		lo = binary.BigEndian.AppendUint16(lo, uint16(v))
	case typeInteger:
		v, err := strconv.ParseUint(s, 10, 32)
		if err != nil {
			return lo, hi, fmt.Errorf("integer %q: %w", s, errUndecodable)
		}
		lo = binary.NativeEndian.AppendUint32(lo, uint32(v))
	default:
		return lo, hi, fmt.Errorf("datatype %d: %w", f.typ, errUndecodable)
	}
	if interval {
		hi = append(hi, lo[n:]...)
	}
	return lo, hi, nil
}

// encodePrefix returns the first and last address of prefix s.
func encodePrefix(f field, s string) (lo, hi []byte, err error) {
	p, err := netip.ParsePrefix(s)
	if err != nil || p.Addr().BitLen()/8 != f.len {
		return nil, nil, fmt.Errorf("prefix %q: %w", s, errUndecodable)
	}
	lo = p.Masked().Addr().AsSlice()
	hi = append([]byte(nil), lo...)
	for i := p.Bits(); i < len(hi)*8; i++ {
		hi[i/8] |= 0x80 >> (i % 8)
	}
	return lo, hi, nil
}

func protoNumber(s string) (byte, error) {
	switch s {
	case "tcp":
		return unix.IPPROTO_TCP, nil
	case "udp":
		return unix.IPPROTO_UDP, nil
	case "sctp":
		return unix.IPPROTO_SCTP, nil
	}
	n, err := strconv.ParseUint(s, 10, 8)
	if err != nil {
		return 0, fmt.Errorf("protocol %q: %w", s, errUndecodable)
	}
	return byte(n), nil
}

// appendVerdict appends NFTA_DATA_VERDICT for a verdict as the store
// spells it ("goto x", "drop"; see spellVerdict).
func appendVerdict(b []byte, v string) ([]byte, error) {
	verb, chain, _ := strings.Cut(v, " ")
	var code int32
	switch verb {
	case "drop":
		code = 0 // NF_DROP
	case "accept":
		code = 1 // NF_ACCEPT
	case "continue":
		code = unix.NFT_CONTINUE
	case "return":
		code = unix.NFT_RETURN
	case "jump":
		code = unix.NFT_JUMP
	case "goto":
		code = unix.NFT_GOTO
	default:
		return b, fmt.Errorf("verdict %q: %w", v, errUndecodable)
	}
	if (code == unix.NFT_JUMP || code == unix.NFT_GOTO) != (chain != "") {
		return b, fmt.Errorf("verdict %q: %w", v, errUndecodable)
	}
	// The chain goes as a NUL-terminated string: a NUL inside would cut
	// it short, and the kernel refuses names of NFT_CHAIN_MAXNAMELEN
	// bytes or more (found by FuzzElemRoundTrip).
	if strings.IndexByte(chain, 0) >= 0 || len(chain) >= unix.NFT_CHAIN_MAXNAMELEN {
		return b, fmt.Errorf("verdict %q: chain name: %w", v, errUndecodable)
	}
	n := len(b)
	b = knetlink.NestStart(b, unix.NFTA_DATA_VERDICT)
	b = knetlink.AppendAttr(b, unix.NFTA_VERDICT_CODE, binary.BigEndian.AppendUint32(nil, uint32(code)))
	if chain != "" {
		b = append(b, knetlink.AppendString(nil, unix.NFTA_VERDICT_CHAIN, chain)...)
	}
	knetlink.NestEnd(b, n)
	return b, nil
}
