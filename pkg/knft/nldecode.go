package knft

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math/bits"
	"net/netip"
	"strconv"

	"golang.org/x/sys/unix"

	"github.com/svcproxy/svcproxy/pkg/knetlink"
)

// nft datatype numbers (nftables' include/datatype.h). A concatenated
// type is the field types, 6 bits each, the first field highest.
const (
	typeInteger     = 4
	typeIPAddr      = 7
	typeIP6Addr     = 8
	typeInetProto   = 12
	typeInetService = 13
	concatTypeBits  = 6
)

// field is one component of a key or value.
type field struct {
	typ uint32
	len int // without padding
}

// layout says how to turn a set's binary elements into the strings nft
// prints (and render writes): components joined with " . ".
type layout struct {
	key, data []field
	verdict   bool // the value is a verdict (vmap)
	interval  bool // concatenated ranges: key to key-end
}

var errUndecodable = errors.New("element not decodable")

// setLayout returns the layout of st, or false when the set uses a type or
// shape this decoder does not know (the caller then lists it through nft).
func setLayout(st nlSet) (*layout, bool) {
	l := &layout{}
	var ok bool
	if l.key, ok = fields(st.keyType, st.keyLen); !ok {
		return nil, false
	}
	if st.flags&unix.NFT_SET_INTERVAL != 0 {
		// Only concatenated ranges (one element with key and key-end)
		// are decoded; single-field ranges come as start and end
		// elements.
		if len(l.key) < 2 && st.flags&nftSetConcat == 0 {
			return nil, false
		}
		l.interval = true
	}
	if st.flags&unix.NFT_SET_MAP != 0 {
		if st.dataType == unix.NFT_DATA_VERDICT {
			l.verdict = true
		} else if l.data, ok = fields(st.dataType, st.dataLen); !ok {
			return nil, false
		}
	}
	return l, true
}

// fields splits a (possibly concatenated) type of total length n. In a
// concatenation every field is padded to 4 bytes.
func fields(typ, n uint32) ([]field, bool) {
	var fs []field
	for t := typ; t != 0; t >>= concatTypeBits {
		fs = append([]field{{typ: t & (1<<concatTypeBits - 1)}}, fs...)
	}
	if len(fs) == 0 {
		return nil, false
	}
	sum := 0
	for i := range fs {
		switch fs[i].typ {
		case typeIPAddr:
			fs[i].len = 4
		case typeIP6Addr:
			fs[i].len = 16
		case typeInetProto:
			fs[i].len = 1
		case typeInetService:
			fs[i].len = 2
		case typeInteger: // numgen's slot: 32 bits, host byte order
			fs[i].len = 4
		default:
			return nil, false
		}
		if len(fs) == 1 {
			sum += fs[i].len
		} else {
			sum += knetlink.Align(fs[i].len)
		}
	}
	return fs, uint32(sum) == n
}

// decode turns one NFTA_LIST_ELEM into key and value strings.
func (l *layout) decode(elem []byte) (key, value string, err error) {
	var buf [128]byte
	b, keyEnd, err := l.appendDecoded(buf[:0], elem)
	if err != nil {
		return "", "", err
	}
	return string(b[:keyEnd]), string(b[keyEnd:]), nil
}

// appendDecoded appends the key and then the value of one NFTA_LIST_ELEM,
// spelled, to dst: the key ends at keyEnd (an offset into out), the value
// at the end of out.
func (l *layout) appendDecoded(dst, elem []byte) (out []byte, keyEnd int, err error) {
	var buf [3 * maxDataLen]byte
	data, dataKeyEnd, err := l.decodeData(buf[:0], elem)
	if err != nil {
		return dst, 0, err
	}
	return l.spellData(dst, data[:dataKeyEnd], data[dataKeyEnd:])
}

// decodeData appends the data of one NFTA_LIST_ELEM's key (elemdata.go)
// and then its value (a verdict spelled) to dst: the key ends at keyEnd
// (an offset into out), the value at the end of out. Decoded into one
// buffer, a read-back makes no string per element (nltable.go).
func (l *layout) decodeData(dst, elem []byte) (out []byte, keyEnd int, err error) {
	var k, kEnd, data []byte
	catchAll := false
	a := knetlink.Attrs{B: elem}
	for t, d, ok := a.Next(); ok; t, d, ok = a.Next() {
		switch t {
		case unix.NFTA_SET_ELEM_KEY:
			k = knetlink.Find(d, unix.NFTA_DATA_VALUE)
		case nftaSetElemKeyEnd:
			kEnd = knetlink.Find(d, unix.NFTA_DATA_VALUE)
		case unix.NFTA_SET_ELEM_DATA:
			data = d
		case unix.NFTA_SET_ELEM_FLAGS:
			if beUint32(d)&unix.NFT_SET_ELEM_INTERVAL_END != 0 {
				return dst, 0, errUndecodable
			}
			catchAll = beUint32(d)&nftSetElemCatchall != 0
		}
	}
	if a.Err != nil {
		return dst, 0, a.Err
	}
	n := fieldsLen(l.key)
	if catchAll {
		k, kEnd, n = nil, nil, 0 // no key: its data is empty
	}
	if len(k) != n {
		return dst, 0, errUndecodable
	}
	start := len(dst)
	dst = append(dst, k...)
	if l.interval && !catchAll {
		if kEnd == nil {
			kEnd = k // a single key: the range ends where it starts
		}
		if len(kEnd) != n {
			return dst[:start], 0, errUndecodable
		}
		dst = append(dst, kEnd...)
	}
	keyEnd = len(dst)
	switch {
	case l.verdict:
		dst, err = spellVerdict(dst, knetlink.Find(data, unix.NFTA_DATA_VERDICT))
	case l.data != nil:
		v := knetlink.Find(data, unix.NFTA_DATA_VALUE)
		if len(v) != fieldsLen(l.data) {
			err = errUndecodable
		}
		dst = append(dst, v...)
	}
	if err != nil {
		return dst[:start], 0, err
	}
	return dst, keyEnd, nil
}

// spellFields appends the fields of b (and of the range end, when given)
// joined with " . ".
func spellFields(dst []byte, fs []field, b, end []byte) ([]byte, error) {
	off := 0
	for i, f := range fs {
		if off+f.len > len(b) || (end != nil && off+f.len > len(end)) {
			return dst, errUndecodable
		}
		if i > 0 {
			dst = append(dst, " . "...)
		}
		v := b[off : off+f.len]
		if end != nil && string(end[off:off+f.len]) != string(v) {
			dst = spellRange(dst, f, v, end[off:off+f.len])
		} else {
			dst = spellField(dst, f, v)
		}
		if len(fs) > 1 {
			off += knetlink.Align(f.len)
		} else {
			off += f.len
		}
	}
	return dst, nil
}

func spellField(dst []byte, f field, v []byte) []byte {
	switch f.typ {
	case typeIPAddr:
		a, _ := netip.AddrFromSlice(v)
		return a.Unmap().AppendTo(dst)
	case typeIP6Addr:
		// Not unmapped: an IPv4-mapped address in an IPv6 field is
		// "::ffff:a.b.c.d" to nft, and unmapped it would not encode back
		// into the field (found by FuzzElemRoundTrip).
		a, _ := netip.AddrFromSlice(v)
		return a.AppendTo(dst)
	case typeInetProto:
		switch v[0] {
		case unix.IPPROTO_TCP:
			return append(dst, "tcp"...)
		case unix.IPPROTO_UDP:
			return append(dst, "udp"...)
		case unix.IPPROTO_SCTP:
			return append(dst, "sctp"...)
		}
		return strconv.AppendInt(dst, int64(v[0]), 10)
	case typeInetService:
		return strconv.AppendInt(dst, int64(binary.BigEndian.Uint16(v)), 10)
	case typeInteger:
		return strconv.AppendUint(dst, uint64(binary.NativeEndian.Uint32(v)), 10)
	}
	return dst
}

// spellRange appends a range as nft prints it: an address prefix as
// a/len (a single address plainly), anything else as start-end.
func spellRange(dst []byte, f field, start, end []byte) []byte {
	if f.typ == typeIPAddr || f.typ == typeIP6Addr {
		if bits, ok := prefixLen(start, end); ok {
			a, _ := netip.AddrFromSlice(start)
			return spellPrefix(dst, netip.PrefixFrom(a, bits))
		}
	}
	dst = spellField(dst, f, start)
	dst = append(dst, '-')
	return spellField(dst, f, end)
}

// prefixLen returns the prefix length of the range start..end (inclusive)
// if it is exactly one prefix.
func prefixLen(start, end []byte) (int, bool) {
	host := 0 // low bits where start is all 0 and end all 1
	i := len(start) - 1
	for ; i >= 0 && start[i] == 0 && end[i] == 0xff; i-- {
		host += 8
	}
	if i >= 0 {
		x := start[i] ^ end[i]
		if start[i]&x != 0 || end[i]&x != x || bits.OnesCount8(x+1) != 1 {
			return 0, false
		}
		host += bits.TrailingZeros8(^x)
		if string(start[:i]) != string(end[:i]) {
			return 0, false
		}
	}
	return len(start)*8 - host, true
}

// spellVerdict spells a verdict as knftables returns it ("goto x",
// "drop").
func spellVerdict(dst, b []byte) ([]byte, error) {
	code := int32(beUint32(knetlink.Find(b, unix.NFTA_VERDICT_CODE)))
	chain := knetlink.Find(b, unix.NFTA_VERDICT_CHAIN)
	if i := bytes.IndexByte(chain, 0); i >= 0 {
		chain = chain[:i]
	}
	switch code {
	case 0: // NF_DROP
		return append(dst, "drop"...), nil
	case 1: // NF_ACCEPT
		return append(dst, "accept"...), nil
	case unix.NFT_CONTINUE:
		return append(dst, "continue"...), nil
	case unix.NFT_RETURN:
		return append(dst, "return"...), nil
	case unix.NFT_JUMP:
		return append(append(dst, "jump "...), chain...), nil
	case unix.NFT_GOTO:
		return append(append(dst, "goto "...), chain...), nil
	}
	return dst, fmt.Errorf("verdict code %d: %w", code, errUndecodable)
}

// spellPrefix appends a prefix as nft prints it: a full-length prefix is
// a plain address.
func spellPrefix(dst []byte, p netip.Prefix) []byte {
	if p.IsSingleIP() {
		return p.Addr().Unmap().AppendTo(dst)
	}
	return p.AppendTo(dst)
}
