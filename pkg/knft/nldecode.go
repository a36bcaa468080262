package knft

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math/bits"
	"net/netip"
	"strconv"
	"strings"

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
func (l *layout) decode(elem []byte, sb *strings.Builder) (key, value string, err error) {
	var k, kEnd, data []byte
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
			if beUint32(d)&(unix.NFT_SET_ELEM_INTERVAL_END|nftSetElemCatchall) != 0 {
				return "", "", errUndecodable
			}
		}
	}
	if a.Err != nil {
		return "", "", a.Err
	}
	if !l.interval {
		kEnd = nil
	}
	sb.Reset()
	if err := formatFields(sb, l.key, k, kEnd); err != nil {
		return "", "", err
	}
	key = sb.String()
	switch {
	case l.verdict:
		value, err = formatVerdict(knetlink.Find(data, unix.NFTA_DATA_VERDICT))
	case l.data != nil:
		sb.Reset()
		err = formatFields(sb, l.data, knetlink.Find(data, unix.NFTA_DATA_VALUE), nil)
		value = sb.String()
	}
	return key, value, err
}

// formatFields writes the fields of b (and of the range end, when given)
// joined with " . ".
func formatFields(sb *strings.Builder, fs []field, b, end []byte) error {
	off := 0
	for i, f := range fs {
		if off+f.len > len(b) || (end != nil && off+f.len > len(end)) {
			return errUndecodable
		}
		if i > 0 {
			sb.WriteString(" . ")
		}
		v := b[off : off+f.len]
		if end != nil && string(end[off:off+f.len]) != string(v) {
			formatRange(sb, f, v, end[off:off+f.len])
		} else {
			formatField(sb, f, v)
		}
		if len(fs) > 1 {
			off += knetlink.Align(f.len)
		} else {
			off += f.len
		}
	}
	return nil
}

func formatField(sb *strings.Builder, f field, v []byte) {
	switch f.typ {
	case typeIPAddr:
		a, _ := netip.AddrFromSlice(v)
		sb.WriteString(a.Unmap().String())
	case typeIP6Addr:
		// Not unmapped: an IPv4-mapped address in an IPv6 field is
		// "::ffff:a.b.c.d" to nft, and unmapped it would not encode back
		// into the field (found by FuzzElemRoundTrip).
		a, _ := netip.AddrFromSlice(v)
		sb.WriteString(a.String())
	case typeInetProto:
		switch v[0] {
		case unix.IPPROTO_TCP:
			sb.WriteString("tcp")
		case unix.IPPROTO_UDP:
			sb.WriteString("udp")
		case unix.IPPROTO_SCTP:
			sb.WriteString("sctp")
		default:
			sb.WriteString(strconv.Itoa(int(v[0])))
		}
	case typeInetService:
		sb.WriteString(strconv.Itoa(int(binary.BigEndian.Uint16(v))))
	case typeInteger:
		sb.WriteString(strconv.FormatUint(uint64(binary.NativeEndian.Uint32(v)), 10))
	}
}

// formatRange writes a range as nft prints it: an address prefix as
// a/len (a single address plainly), anything else as start-end.
func formatRange(sb *strings.Builder, f field, start, end []byte) {
	if f.typ == typeIPAddr || f.typ == typeIP6Addr {
		if bits, ok := prefixLen(start, end); ok {
			a, _ := netip.AddrFromSlice(start)
			writePrefix(sb, netip.PrefixFrom(a, bits))
			return
		}
	}
	formatField(sb, f, start)
	sb.WriteByte('-')
	formatField(sb, f, end)
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

// formatVerdict spells a verdict as knftables returns it ("goto x", "drop").
func formatVerdict(b []byte) (string, error) {
	code, chain := int32(beUint32(knetlink.Find(b, unix.NFTA_VERDICT_CODE))), knetlink.CString(knetlink.Find(b, unix.NFTA_VERDICT_CHAIN))
	switch code {
	case 0: // NF_DROP
		return "drop", nil
	case 1: // NF_ACCEPT
		return "accept", nil
	case unix.NFT_CONTINUE:
		return "continue", nil
	case unix.NFT_RETURN:
		return "return", nil
	case unix.NFT_JUMP:
		return "jump " + chain, nil
	case unix.NFT_GOTO:
		return "goto " + chain, nil
	}
	return "", fmt.Errorf("verdict code %d: %w", code, errUndecodable)
}

// writePrefix writes a prefix as nft prints it: a full-length prefix is a
// plain address.
func writePrefix(sb *strings.Builder, p netip.Prefix) {
	if p.IsSingleIP() {
		sb.WriteString(p.Addr().Unmap().String())
		return
	}
	sb.WriteString(p.String())
}
