package knft

import (
	"slices"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/svcproxy/svcproxy/pkg/knetlink"
)

// nest builds a netlink attribute holding payload.
func nest(typ uint16, payload ...[]byte) []byte {
	body := slices.Concat(payload...)
	l := 4 + len(body)
	b := make([]byte, knetlink.Align(l))
	b[0], b[1] = byte(l), byte(l>>8) // little-endian hosts only (as the kernel tests)
	b[2], b[3] = byte(typ), byte(typ>>8)
	copy(b[4:], body)
	return b
}

func be32(v uint32) []byte { return []byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)} }

// TestDecodeElements checks the binary-to-nft spelling without a kernel
// (the kernel tests compare with nft's own listing on every shared case).
func TestDecodeElements(t *testing.T) {
	addr4 := []byte{10, 96, 0, 1}
	tcpPort := []byte{unix.IPPROTO_TCP, 0, 0, 0, 0, 80, 0, 0}
	slot := []byte{3, 0, 0, 0} // host byte order (little-endian here)
	epMap := nlSet{flags: unix.NFT_SET_MAP,
		keyType: typeIPAddr<<18 | typeInetProto<<12 | typeInetService<<6 | typeInteger, keyLen: 16,
		dataType: typeIPAddr<<6 | typeInetService, dataLen: 8}
	verdictMap := nlSet{flags: unix.NFT_SET_MAP, keyType: typeInetProto<<6 | typeInetService, keyLen: 8,
		dataType: unix.NFT_DATA_VERDICT}
	ranges := nlSet{flags: unix.NFT_SET_INTERVAL | nftSetConcat,
		keyType: typeIPAddr<<18 | typeInetProto<<12 | typeInetService<<6 | typeIPAddr, keyLen: 16}
	key := func(b ...[]byte) []byte { return nest(unix.NFTA_SET_ELEM_KEY, nest(unix.NFTA_DATA_VALUE, b...)) }
	keyEnd := func(b ...[]byte) []byte { return nest(nftaSetElemKeyEnd, nest(unix.NFTA_DATA_VALUE, b...)) }
	for _, c := range []struct {
		name       string
		set        nlSet
		elem       []byte
		key, value string
	}{
		{"endpoint map", epMap,
			slices.Concat(key(addr4, tcpPort, slot), nest(unix.NFTA_SET_ELEM_DATA, nest(unix.NFTA_DATA_VALUE, []byte{10, 0, 1, 5}, []byte{0x1f, 0x90, 0, 0}))),
			"10.96.0.1 . tcp . 80 . 3", "10.0.1.5 . 8080"},
		{"verdict map", verdictMap,
			slices.Concat(key([]byte{unix.IPPROTO_SCTP, 0, 0, 0, 0x75, 0x30, 0, 0}), nest(unix.NFTA_SET_ELEM_DATA,
				nest(unix.NFTA_DATA_VERDICT, nest(unix.NFTA_VERDICT_CODE, be32(uint32(0xfffffffc))), nest(unix.NFTA_VERDICT_CHAIN, []byte("external-2\x00"))))),
			"sctp . 30000", "goto external-2"},
		{"prefix range", ranges,
			slices.Concat(key(addr4, tcpPort, []byte{192, 168, 0, 0}), keyEnd(addr4, tcpPort, []byte{192, 168, 255, 255})),
			"10.96.0.1 . tcp . 80 . 192.168.0.0/16", ""},
		{"single-address range", ranges,
			slices.Concat(key(addr4, tcpPort, []byte{192, 168, 0, 7}), keyEnd(addr4, tcpPort, []byte{192, 168, 0, 7})),
			"10.96.0.1 . tcp . 80 . 192.168.0.7", ""},
	} {
		l, ok := setLayout(c.set)
		if !ok {
			t.Fatalf("%s: layout not decodable", c.name)
		}
		k, v, err := l.decode(c.elem)
		if err != nil || k != c.key || v != c.value {
			t.Errorf("%s: got %q : %q (%v), want %q : %q", c.name, k, v, err, c.key, c.value)
		}
	}
	// A range that is no prefix is spelled start-end, which nft accepts
	// back (to delete it).
	l, _ := setLayout(ranges)
	k, _, err := l.decode(slices.Concat(key(addr4, tcpPort, []byte{192, 168, 0, 1}), keyEnd(addr4, tcpPort, []byte{192, 168, 0, 2})))
	if want := "10.96.0.1 . tcp . 80 . 192.168.0.1-192.168.0.2"; err != nil || k != want {
		t.Errorf("non-prefix range: got %q (%v), want %q", k, err, want)
	}
	for _, c := range []struct {
		start, end []byte
		bits       int
		ok         bool
	}{
		{[]byte{10, 0, 0, 0}, []byte{10, 255, 255, 255}, 8, true},
		{[]byte{0, 0, 0, 0}, []byte{255, 255, 255, 255}, 0, true},
		{[]byte{10, 0, 0, 128}, []byte{10, 0, 0, 191}, 26, true},
		{[]byte{10, 0, 0, 64}, []byte{10, 0, 0, 191}, 0, false},
		{[]byte{10, 0, 1, 0}, []byte{10, 1, 0, 255}, 0, false},
	} {
		if bits, ok := prefixLen(c.start, c.end); ok != c.ok || (ok && bits != c.bits) {
			t.Errorf("prefixLen(%v, %v) = %d, %v; want %d, %v", c.start, c.end, bits, ok, c.bits, c.ok)
		}
	}
	// Unknown types and single-field ranges are left to nft.
	for _, st := range []nlSet{{keyType: 19, keyLen: 4}, {flags: unix.NFT_SET_INTERVAL, keyType: typeIPAddr, keyLen: 4}} {
		if _, ok := setLayout(st); ok {
			t.Errorf("layout of %+v claimed decodable", st)
		}
	}
}
