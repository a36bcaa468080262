package knft

import (
	"bytes"
	"fmt"
	"testing"
)

// dataCases are one element of each layout render uses (fuzzLayouts, in
// that order: IPv4, then IPv6), spelled as nft prints it.
var dataCases = []struct{ key, value string }{
	{"172.30.0.10 . tcp . 80", "goto internal-10-s3"},
	{"udp . 30053", "jump external-2-s0"},
	{"10.0.0.1", ""},
	{"172.30.0.10 . sctp . 443", ""},
	{"203.0.113.7 . tcp . 80 . 10.0.0.0/8", ""},
	{"10.0.0.1 . 10.0.0.1", ""},
	{"172.30.0.10 . tcp . 80 . 3", "10.1.0.5 . 8080"},
	{"tcp . 30080 . 0", "10.1.0.5 . 8080"},
	{"fd00::10 . tcp . 80", "drop"},
	{"udp . 53", "accept"},
	{"fd00::1", ""},
	{"fd00::1 . udp . 53", ""},
	{"2001:db8::7 . tcp . 443 . 2001:db8::/32", ""},
	{"fd00::1 . fd00::1", ""},
	{"fd00::10 . udp . 53 . 1", "fd00:1::5 . 53"},
	{"sctp . 30000 . 7", "fd00:1::5 . 9"},
}

// TestElemDataRoundTrip: for every layout render uses, in both families,
// an element's data (as the store keeps it) encodes to the same netlink
// attributes as its spelling, decodes back to the same data, and spells
// as nft does; a delete names the key alone.
func TestElemDataRoundTrip(t *testing.T) {
	if len(dataCases) != len(fuzzLayouts) {
		t.Fatalf("%d cases for %d layouts", len(dataCases), len(fuzzLayouts))
	}
	for i, c := range dataCases {
		l := fuzzLayouts[i]
		key, err := l.parseKey(nil, c.key)
		if err != nil {
			t.Fatalf("%q: %v", c.key, err)
		}
		if len(key) != l.keyDataLen() {
			t.Errorf("%q: key data of %d bytes, want %d", c.key, len(key), l.keyDataLen())
		}
		value, err := l.parseValue(nil, c.value)
		if err != nil {
			t.Fatalf("%q: %v", c.value, err)
		}
		for _, withValue := range []bool{true, false} {
			fromData, err := l.appendElemData(nil, key, value, withValue)
			if err != nil {
				t.Fatalf("{%s : %s}: data does not encode: %v", c.key, c.value, err)
			}
			fromText, err := l.appendElem(nil, c.key, c.value, withValue)
			if err != nil || !bytes.Equal(fromData, fromText) {
				t.Errorf("{%s : %s}: data encodes as %x, the spelling as %x (%v)", c.key, c.value, fromData, fromText, err)
			}
			dl := l
			wantValue := value
			if !withValue {
				dl, wantValue = keyOnly(l), nil
			}
			out, keyEnd, err := dl.decodeData(nil, elemOf(t, fromData))
			if err != nil || !bytes.Equal(out[:keyEnd], key) || !bytes.Equal(out[keyEnd:], wantValue) {
				t.Errorf("{%s : %s}: decoded as %x : %x (%v), want %x : %x", c.key, c.value, out[:keyEnd], out[keyEnd:], err, key, wantValue)
			}
		}
		spelled, keyEnd, err := l.spellData(nil, key, value)
		if err != nil || string(spelled[:keyEnd]) != c.key || string(spelled[keyEnd:]) != c.value {
			t.Errorf("{%s : %s}: data spelled {%s : %s} (%v)", c.key, c.value, spelled[:keyEnd], spelled[keyEnd:], err)
		}
	}
}

// TestElemDataRejects: data of the wrong length for the layout is an
// error, never sent.
func TestElemDataRejects(t *testing.T) {
	epMap := fuzzLayouts[6] // IPv4 endpoint map: 16-byte key, 8-byte value
	vmap := fuzzLayouts[0]
	for _, c := range []struct {
		l          *layout
		key, value []byte
	}{
		{epMap, make([]byte, 15), make([]byte, 8)},
		{epMap, make([]byte, 16), make([]byte, 20)}, // an IPv6 value
		{epMap, make([]byte, 28), make([]byte, 8)},  // an IPv6 key
		{vmap, make([]byte, 12), []byte("goto")},
		{fuzzLayouts[4], make([]byte, 16), nil}, // an interval key without its end
	} {
		if b, err := c.l.appendElemData(nil, c.key, c.value, true); err == nil {
			t.Errorf("%x : %x encoded as %x, want an error", c.key, c.value, b)
		}
	}
}

// FuzzElemData: whatever data the encoder accepts for a layout, the
// decoder reads back as the same data, and its spelling parses back to it.
func FuzzElemData(f *testing.F) {
	for i, c := range dataCases {
		l := fuzzLayouts[i]
		key, _ := l.parseKey(nil, c.key)
		value, _ := l.parseValue(nil, c.value)
		f.Add(uint8(i), key, value)
	}
	f.Fuzz(func(t *testing.T, which uint8, key, value []byte) {
		l := fuzzLayouts[int(which)%len(fuzzLayouts)]
		b, err := l.appendElemData(nil, key, value, true)
		if err != nil {
			return
		}
		out, keyEnd, err := l.decodeData(nil, elemOf(t, b))
		if err != nil {
			t.Fatalf("%x : %x encoded, does not decode: %v", key, value, err)
		}
		wantValue := value // a set's element has none; a verdict is checked by FuzzElemRoundTrip
		if l.data == nil && !l.verdict {
			wantValue = nil
		}
		if !bytes.Equal(out[:keyEnd], key) || !bytes.Equal(out[keyEnd:], wantValue) && !l.verdict {
			t.Fatalf("%x : %x decoded as %x : %x", key, value, out[:keyEnd], out[keyEnd:])
		}
		spelled, sEnd, err := l.spellData(nil, out[:keyEnd], out[keyEnd:])
		if err != nil {
			t.Fatalf("%x : %x decoded, does not spell: %v", key, value, err)
		}
		// An interval's ends in another order, or a range that is no
		// prefix within a field nft keeps whole, spell as nft prints
		// them, which need not parse back into the same bytes; the rest
		// must.
		if l.interval {
			return
		}
		k2, err := l.parseKey(nil, string(spelled[:sEnd]))
		if err != nil || !bytes.Equal(k2, key) {
			t.Fatalf("%x spelled %q, which parses as %x (%v)", key, spelled[:sEnd], k2, err)
		}
	})
}

// BenchmarkEncodeElem is the encoder's work per element at 10k × 10's
// most numerous layouts: 100k elements of a hairpin set (a . a) and of an
// endpoint map (frontend . slot → address . port), from their data (what
// the backend sends) and, for comparison, from their spelling parsed first
// (what Knftables' read-back and the tests do).
func BenchmarkEncodeElem(b *testing.B) {
	const n = 100_000
	for _, c := range []struct {
		name string
		l    *layout
		elem func(i int) (key, value string)
	}{
		{"hairpin", fuzzLayouts[5], func(i int) (string, string) {
			a := fmt.Sprintf("10.%d.%d.%d", i>>16, i>>8&0xff, i&0xff)
			return a + ElemSep + a, ""
		}},
		{"endpoints", fuzzLayouts[6], func(i int) (string, string) {
			return fmt.Sprintf("172.30.%d.%d . tcp . 80 . %d", i/10>>8, i/10&0xff, i%10), fmt.Sprintf("10.244.%d.%d . 8080", i>>8&0xff, i&0xff)
		}},
	} {
		keys, values := make([]string, n), make([]string, n)
		dataKeys, dataValues := make([][]byte, n), make([][]byte, n)
		for i := range n {
			keys[i], values[i] = c.elem(i)
			dataKeys[i], _ = c.l.parseKey(nil, keys[i])
			dataValues[i], _ = c.l.parseValue(nil, values[i])
		}
		b.Run(c.name+"/spelled", func(b *testing.B) {
			var buf []byte
			for b.Loop() {
				for i := range n {
					var err error
					if buf, err = c.l.appendElem(buf[:0], keys[i], values[i], true); err != nil {
						b.Fatal(err)
					}
				}
			}
		})
		b.Run(c.name+"/data", func(b *testing.B) {
			var buf []byte
			for b.Loop() {
				for i := range n {
					var err error
					if buf, err = c.l.appendElemData(buf[:0], dataKeys[i], dataValues[i], true); err != nil {
						b.Fatal(err)
					}
				}
			}
		})
	}
}
