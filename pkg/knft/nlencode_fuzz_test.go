package knft

import (
	"bytes"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/svcproxy/svcproxy/pkg/knetlink"
)

// fuzzLayouts are the set layouts render creates (pkg/pipeline/backends/nftables
// render_global.go, render_dispatch.go), in both families: the fuzz
// targets pick one by index.
var fuzzLayouts = func() []*layout {
	ip4, ip6 := field{typeIPAddr, 4}, field{typeIP6Addr, 16}
	proto, port, slot := field{typeInetProto, 1}, field{typeInetService, 2}, field{typeInteger, 4}
	var out []*layout
	for _, a := range []field{ip4, ip6} {
		out = append(out,
			&layout{key: []field{a, proto, port}, verdict: true},                // service-ips
			&layout{key: []field{proto, port}, verdict: true},                   // service-nodeports
			&layout{key: []field{a}},                                            // nodeport-ips, cluster-ips
			&layout{key: []field{a, proto, port}},                               // firewall-guards
			&layout{key: []field{a, proto, port, a}, interval: true},            // firewall-allow
			&layout{key: []field{a, a}},                                         // hairpin
			&layout{key: []field{a, proto, port, slot}, data: []field{a, port}}, // endpoint maps
			&layout{key: []field{proto, port, slot}, data: []field{a, port}},    // node-port endpoint maps
		)
	}
	return out
}()

// elemOf returns the one NFTA_LIST_ELEM payload in b.
func elemOf(t *testing.T, b []byte) []byte {
	t.Helper()
	a := knetlink.Attrs{B: b}
	typ, elem, ok := a.Next()
	if !ok || typ != unix.NFTA_LIST_ELEM || len(a.B) != 0 {
		t.Fatalf("encoding %x is not one NFTA_LIST_ELEM", b)
	}
	return elem
}

// keyOnly is l for decoding a delete, which names the key only.
func keyOnly(l *layout) *layout {
	k := *l
	k.verdict, k.data = false, nil
	return &k
}

// FuzzElemRoundTrip: whatever the encoder accepts, the decoder reads back,
// and the decoded spelling encodes to the same bytes and decodes to itself
// (nft's canonical spelling is a fixed point). Seeds: one element of each
// layout in render's spelling; TestEncodeDecodeRoundTrip checks that those
// decode to exactly themselves.
func FuzzElemRoundTrip(f *testing.F) {
	// Seeds 0-7 are IPv4 layouts, 8-15 IPv6 ones, in the same order
	// (dataCases), then ranges of the interval layouts.
	for i, s := range dataCases {
		f.Add(uint8(i), s.key, s.value, true)
		f.Add(uint8(i), s.key, s.value, false)
	}
	f.Add(uint8(4), "203.0.113.0/24 . tcp . 80 . 10.0.0.0/8", "", false)
	f.Add(uint8(12), "2001:db8::/32 . tcp . 1-1024 . ::/0", "", false)
	f.Add(uint8(0), "172.30.0.10 . tcp . 80", "goto service-ABCDEF-ns/web/tcp/http", true)
	// IPv4-mapped addresses in IPv6 sets; the first was a crasher.
	f.Add(uint8(10), "::ffff:10.0.0.1", "", false)
	f.Add(uint8(12), "::ffff:10.0.0.0/104 . tcp . 80 . ::ffff:0.0.0.0-::ffff:0.0.0.9", "", false)
	f.Fuzz(func(t *testing.T, which uint8, key, value string, withValue bool) {
		l := fuzzLayouts[int(which)%len(fuzzLayouts)]
		dl := l
		if !withValue {
			dl = keyOnly(l)
		}
		b, err := l.appendElem(nil, key, value, withValue)
		if err != nil {
			return // not spelled exactly: not an element
		}
		k1, v1, err := dl.decode(elemOf(t, b))
		if err != nil {
			t.Fatalf("encoded {%q : %q} does not decode: %v", key, value, err)
		}
		b2, err := l.appendElem(nil, k1, v1, withValue)
		if err != nil || !bytes.Equal(b, b2) {
			t.Fatalf("{%q : %q} decoded as {%q : %q}, which encodes differently (%v)", key, value, k1, v1, err)
		}
		k2, v2, err := dl.decode(elemOf(t, b2))
		if err != nil || k2 != k1 || v2 != v1 {
			t.Fatalf("decoded spelling {%q : %q} is not a fixed point: {%q : %q} (%v)", k1, v1, k2, v2, err)
		}
	})
}

// FuzzElemDecode: the decoder reads what the kernel sends; whatever bytes
// come, it must not panic, and what it decodes must round-trip.
func FuzzElemDecode(f *testing.F) {
	for i, l := range fuzzLayouts {
		key := "10.0.0.1"
		if l.key[0].typ == typeIP6Addr {
			key = "fd00::1"
		}
		if b, err := l.appendElem(nil, key, "", false); err == nil {
			f.Add(uint8(i), b)
		}
	}
	f.Add(uint8(0), []byte{8, 0, 1, 0x80, 4, 0, 1, 0x80})
	f.Fuzz(func(t *testing.T, which uint8, b []byte) {
		l := fuzzLayouts[int(which)%len(fuzzLayouts)]
		a := knetlink.Attrs{B: b}
		_, elem, ok := a.Next()
		if !ok {
			return
		}
		key, value, err := l.decode(elem)
		if err != nil {
			return
		}
		enc, err := l.appendElem(nil, key, value, true)
		if err != nil {
			return // e.g. a chain name the encoder will not spell
		}
		k2, v2, err := l.decode(elemOf(t, enc))
		if err != nil || k2 != key || v2 != value {
			t.Fatalf("decoded {%q : %q}, re-encoded and decoded {%q : %q} (%v)", key, value, k2, v2, err)
		}
	})
}
