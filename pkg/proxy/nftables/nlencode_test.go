package nftables

import (
	"strings"
	"testing"

	"golang.org/x/sys/unix"
	"sigs.k8s.io/knftables"

	"github.com/svcproxy/svcproxy/pkg/proxy"
	"github.com/svcproxy/svcproxy/pkg/proxy/proxytest"
)

// specLayout is the layout the kernel reports for a set render declares,
// built from the declaration's text (type names and typeof expressions).
func specLayout(t *testing.T, d *setSpec) *layout {
	t.Helper()
	decl := d.typ
	if decl == "" {
		decl = d.typeOf
	}
	keyDecl, dataDecl, isMap := strings.Cut(decl, " : ")
	var st nlSet
	st.keyType, st.keyLen = declType(t, keyDecl)
	if isMap {
		st.flags |= unix.NFT_SET_MAP
		if dataDecl == "verdict" {
			st.dataType = unix.NFT_DATA_VERDICT
		} else {
			st.dataType, st.dataLen = declType(t, dataDecl)
		}
	}
	for _, f := range d.flags {
		if f == knftables.IntervalFlag {
			st.flags |= unix.NFT_SET_INTERVAL | nftSetConcat
		}
	}
	l, ok := setLayout(st)
	if !ok {
		t.Fatalf("set %s (%s): no layout", d.name, decl)
	}
	return l
}

// declType is the kernel's type number and key length of a declaration.
func declType(t *testing.T, decl string) (typ, n uint32) {
	t.Helper()
	parts := strings.Split(decl, " . ")
	for _, p := range parts {
		var ft, fl uint32
		switch {
		case p == "ipv4_addr" || p == "ip daddr" || p == "ip saddr":
			ft, fl = typeIPAddr, 4
		case p == "ipv6_addr" || p == "ip6 daddr" || p == "ip6 saddr":
			ft, fl = typeIP6Addr, 16
		case p == "inet_proto" || p == "meta l4proto":
			ft, fl = typeInetProto, 1
		case p == "inet_service" || p == "th dport":
			ft, fl = typeInetService, 2
		case strings.HasPrefix(p, "numgen "):
			ft, fl = typeInteger, 4
		default:
			t.Fatalf("declaration %q: unknown field %q", decl, p)
		}
		typ = typ<<concatTypeBits | ft
		if len(parts) > 1 {
			fl = uint32(nlAlign(int(fl)))
		}
		n += fl
	}
	return typ, n
}

// TestEncodeDecodeRoundTrip encodes every element the shared cases render,
// in both families, as an add and as a delete, and decodes it back: the
// decoder reads what the kernel stores, so an element that survives the
// round trip is spelled to the kernel as nft would.
func TestEncodeDecodeRoundTrip(t *testing.T) {
	seen := map[string]bool{}
	for _, family := range proxy.Families {
		for _, c := range proxytest.Cases() {
			p := NewWithInterface(family, knftables.NewFake(specFor(family).family, TableName))
			mustSync(t, p, proxytest.BuildState(t, c, family))
			for set, elems := range p.store.elems {
				l := specLayout(t, p.store.sets[set].desired)
				for key, e := range elems {
					seen[familySetKind(family, set)] = true
					roundTrip(t, l, set, key, e.kernel)
				}
			}
		}
	}
	// Every layout render creates must have been exercised.
	for _, family := range proxy.Families {
		for _, set := range []string{mapServiceIPs, mapServiceNodePorts, setNodePortIPs, setClusterIPs,
			setFirewallIPs, setFirewallAllow, setHairpin, "internal-endpoints", "external-nodeport-endpoints"} {
			if !seen[string(family)+" "+set] {
				t.Errorf("%s: no element of %s was round-tripped", family, set)
			}
		}
	}
}

// familySetKind names a set for the coverage check: endpoint maps by
// their prefix, without the count.
func familySetKind(family proxy.IPFamily, set string) string {
	if i := strings.LastIndex(set, "-endpoints-"); i >= 0 {
		set = set[:i+len("-endpoints")]
	}
	return string(family) + " " + set
}

func roundTrip(t *testing.T, l *layout, set, key, value string) {
	t.Helper()
	var sb strings.Builder
	for _, withValue := range []bool{true, false} {
		b, err := l.appendElem(nil, key, value, withValue)
		if err != nil {
			t.Errorf("%s {%s : %s}: encode: %v", set, key, value, err)
			return
		}
		var a attrs
		a.b = b
		typ, elem, ok := a.next()
		if !ok || typ != unix.NFTA_LIST_ELEM || len(a.b) != 0 {
			t.Errorf("%s {%s}: not one NFTA_LIST_ELEM", set, key)
			return
		}
		if !withValue { // a delete names the key only: decode that
			dl := *l
			dl.verdict, dl.data = false, nil
			l = &dl
			if find(elem, unix.NFTA_SET_ELEM_DATA) != nil {
				t.Errorf("%s {%s}: a delete carries a value", set, key)
			}
		}
		gotKey, gotValue, err := l.decode(elem, &sb)
		want := value
		if !withValue {
			want = ""
		}
		if err != nil || gotKey != key || gotValue != want {
			t.Errorf("%s: encoded {%s : %s}, decoded {%s : %s} (%v)", set, key, want, gotKey, gotValue, err)
		}
	}
}

// TestEncodeRejects: what the encoder cannot spell exactly is an error (the
// element then goes through nft), never a guess.
func TestEncodeRejects(t *testing.T) {
	v4 := &layout{key: []field{{typeIPAddr, 4}, {typeInetProto, 1}, {typeInetService, 2}}, verdict: true}
	for _, c := range []struct{ key, value string }{
		{"10.0.0.1 . tcp", "drop"},             // too few fields
		{"10.0.0.1 . tcp . 80 . 1", "drop"},    // too many
		{"fd00::1 . tcp . 80", "drop"},         // wrong family
		{"10.0.0.1 . tcp . 65536", "drop"},     // port out of range
		{"10.0.0.1 . tcp . 80", "goto"},        // goto without chain
		{"10.0.0.1 . tcp . 80", "reject"},      // not a verdict
		{"10.0.0.1 . tcp . 80-90", "drop"},     // a range in a set without intervals
		{"10.0.0.0/8 . tcp . 80", "goto x"},    // a prefix likewise
		{"10.0.0.1 . bogus . 80", "goto x"},    // unknown protocol name
		{"10.0.0.1 . tcp . 80", "drop . drop"}, // not one verdict
	} {
		if _, err := v4.appendElem(nil, c.key, c.value, true); err == nil {
			t.Errorf("{%s : %s}: encoded, want an error", c.key, c.value)
		}
	}
}
