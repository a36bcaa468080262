package knft

import (
	"context"
	"fmt"
	"slices"
	"testing"

	"sigs.k8s.io/knftables"
)

// A set asked as data reads back as the kernel's bytes, the form render
// makes (a concatenation's fields padded to 4 bytes, a verdict spelled, a
// catch-all with no key);
// a set of another layout than the one asked lists no element. Over
// netlink (the decoder's data, unspelled) and through the fake (knftables'
// spelled listing, parsed).
func TestKernelReadBackAsData(t *testing.T) {
	inTable(t, "knftdata", func(ctx context.Context, k *Kernel) error { return readBackAsData(ctx, t, k) })
}

func TestFakeReadBackAsData(t *testing.T) {
	fake := NewFake(knftables.NewFake(knftables.IPv4Family, testTable), nil)
	if _, err := fake.Apply(context.Background(), [][]*Unit{{createSets}}); err != nil {
		t.Fatal(err)
	}
	if err := readBackAsData(context.Background(), t, fake); err != nil {
		t.Fatal(err)
	}
}

func readBackAsData(ctx context.Context, t *testing.T, k Interface) error {
	objects := &Unit{Objects: func(tx *knftables.Transaction) {
		tx.Add(&knftables.Chain{Name: "c"})
		tx.Add(&knftables.Map{Name: "m", Type: "ipv4_addr . inet_proto . inet_service : verdict"})
		tx.Add(&knftables.Set{Name: "h", Type: "ipv4_addr . ipv4_addr"})
		tx.Add(&knftables.Element{Map: "m", Key: []string{"*"}, Value: []string{"drop"}})
	}, Ops: 4}
	txs := [][]*Unit{{objects}, {
		elems("s", Change{Key: "10.0.0.1", Add: true}),
		elems("u", Change{Key: "10.0.0.9", Add: true}),
		elems("h", Change{Key: "10.0.0.2 . 10.0.0.2", Add: true}, Change{Key: "10.0.0.3 . 10.0.0.4", Add: true}),
		elems("m", Change{Key: "10.0.0.1 . tcp . 80", Value: "goto c", Add: true}),
	}}
	if _, err := k.Apply(ctx, txs); err != nil {
		return err
	}
	r := newRecordSink(t)
	r.as = map[string]*Layout{
		"s": DeclaredLayout("ipv4_addr", "", nil, false),
		"h": DeclaredLayout("ipv4_addr . ipv4_addr", "", nil, false),
		"m": DeclaredLayout("ipv4_addr . inet_proto . inet_service : verdict", "", nil, true),
		"u": DeclaredLayout("ipv6_addr", "", nil, false), // another layout
	}
	if err := k.ReadBack(ctx, r); err != nil {
		return err
	}
	want := map[string][]string{
		"s": {"\x0a\x00\x00\x01 : "},
		"h": {"\x0a\x00\x00\x02\x0a\x00\x00\x02 : ", "\x0a\x00\x00\x03\x0a\x00\x00\x04 : "},
		"m": {"\x0a\x00\x00\x01\x06\x00\x00\x00\x00\x50\x00\x00 : goto c", " : drop"}, // a catch-all: no key
		"u": nil,
	}
	for set, w := range want {
		got := slices.Sorted(slices.Values(r.elems[set]))
		if !slices.Equal(got, w) || !r.listed[set] {
			return fmt.Errorf("set %s: %q (listed %v), want %q", set, got, r.listed[set], w)
		}
	}
	return nil
}
