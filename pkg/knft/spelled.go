package knft

import (
	"context"
	"encoding/binary"
	"fmt"
	"net/netip"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
	"sigs.k8s.io/knftables"

	"github.com/svcproxy/svcproxy/pkg/knetlink"
)

// Parsing nft's spelling of an element into its data (elemdata.go) is for
// where elements come spelled and data is wanted: knftables' listings,
// read back by Knftables (the unit tests' Fake, and NewKnftables, the
// alternative the Kernel is measured against) for a Sink that asks for a
// set as data; and the tests, which write elements as nft spells them.
// The Kernel never parses an element: a unit's elements go to netlink
// only as data (Unit.Layout), a spelled unit goes through nft, and a set
// asked as data is decoded as data (nldecode.go).

// parseKey appends the data of key, spelled, to dst.
func (l *layout) parseKey(dst []byte, key string) ([]byte, error) {
	if key == catchAllKey {
		return dst, nil
	}
	if !l.interval {
		out, _, err := encodeFields(dst, nil, l.key, key, false)
		return out, err
	}
	var eb [maxDataLen]byte
	out, end, err := encodeFields(dst, eb[:0], l.key, key, true)
	if err != nil {
		return nil, err
	}
	return append(out, end...), nil
}

// parseValue appends the data of a map's value, spelled, to dst; a
// verdict is appended as it is spelled.
func (l *layout) parseValue(dst []byte, value string) ([]byte, error) {
	switch {
	case l.verdict:
		return append(dst, value...), nil
	case l.data != nil:
		out, _, err := encodeFields(dst, nil, l.data, value, false)
		return out, err
	}
	if value != "" {
		return nil, fmt.Errorf("value %q of a set element: %w", value, errUndecodable)
	}
	return dst, nil
}

// parseElem appends the data of key and value, spelled, to dst; the key
// ends at keyEnd.
func (l *layout) parseElem(dst []byte, key, value string) (out []byte, keyEnd int, err error) {
	start := len(dst)
	if dst, err = l.parseKey(dst, key); err != nil {
		return dst[:start], 0, err
	}
	keyEnd = len(dst)
	if dst, err = l.parseValue(dst, value); err != nil {
		return dst[:start], 0, err
	}
	return dst, keyEnd, nil
}

// encodeFields appends s, fields joined with " . ", to dst: in a
// concatenation every field is padded to 4 bytes. With interval it also
// appends the range's inclusive end to end (a field without a range ends
// where it starts).
func encodeFields(dst, end []byte, fs []field, s string, interval bool) ([]byte, []byte, error) {
	concat := len(fs) > 1
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

// readElementsKnftables lists one set's elements through knftables,
// spelled, or as data in layout as when it is not nil: knftables' listing
// is spelled, so each element is parsed, and one that does not parse
// into as is of another layout and left out.
func readElementsKnftables(ctx context.Context, nft knftables.Interface, isMap bool, name string, as *layout, sink Sink) error {
	if as == nil {
		return readSpelled(ctx, nft, isMap, name, sink)
	}
	var data []byte
	err := listElements(ctx, nft, isMap, name, func(key, value []byte) {
		var keyEnd int
		var err error
		if data, keyEnd, err = as.parseElem(data[:0], string(key), string(value)); err == nil {
			sink.Element(name, data[:keyEnd], data[keyEnd:])
		}
	})
	if err != nil {
		return err
	}
	sink.SetListed(name)
	return nil
}
