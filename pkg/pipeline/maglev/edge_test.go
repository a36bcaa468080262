package maglev

import (
	"math/rand/v2"
	"net/netip"
	"slices"
	"testing"

	"github.com/svcproxy/svcproxy/pkg/proxy"
)

func TestEdgeCases(t *testing.T) {
	if tab := New(nil); len(tab.Slots) != 0 || len(tab.Backends) != 0 {
		t.Errorf("no backend: %d slots, %d backends; want an empty table", len(tab.Slots), len(tab.Backends))
	} else if _, ok := tab.Lookup(12345); ok {
		t.Error("an empty table found a backend")
	}

	one := proxy.Endpoint{IP: netip.MustParseAddr("10.0.0.1"), Port: 80}
	tab := New([]proxy.Endpoint{one, one, one})
	if len(tab.Backends) != 1 || len(tab.Slots) != 16381 {
		t.Fatalf("one backend thrice: %d backends, %d slots; want 1, 16381", len(tab.Backends), len(tab.Slots))
	}
	for _, h := range []uint32{0, 1, 100, 101, ^uint32(0)} {
		if ep, ok := tab.Lookup(h); !ok || ep != one {
			t.Errorf("one backend: Lookup(%d) = %v, %t", h, ep, ok)
		}
	}

	// The same address on two ports is two backends; an IPv6 table is
	// built and balanced like an IPv4 one.
	v6 := []proxy.Endpoint{
		{IP: netip.MustParseAddr("2001:db8::1"), Port: 80}, {IP: netip.MustParseAddr("2001:db8::1"), Port: 81},
		{IP: netip.MustParseAddr("2001:db8::2"), Port: 80},
	}
	tab = New(v6)
	if !slices.Equal(tab.Backends, v6) || len(tab.Slots) != 16381 {
		t.Fatalf("IPv6: backends %v, %d slots; want %v, 16381", tab.Backends, len(tab.Slots), v6)
	}
	checkShares(t, tab)
}

// TestPastTheBound: more backends than MaxBackends still get a complete,
// balanced table of MaxSize; more backends than slots leave some without
// a slot (shown on a small table), and every slot is still held.
func TestPastTheBound(t *testing.T) {
	n := MaxBackends + 1
	tab := New(endpoints(n))
	if len(tab.Slots) != MaxSize || len(tab.Backends) != n {
		t.Fatalf("%d backends: %d slots, %d backends; want %d, %d", n, len(tab.Slots), len(tab.Backends), MaxSize, n)
	}
	checkShares(t, tab)

	small := &Table{Backends: canonical(endpoints(10))}
	small.populate(7)
	held := map[uint32]bool{}
	for _, s := range small.Slots {
		held[s] = true
	}
	if len(small.Slots) != 7 || len(held) != 7 {
		t.Errorf("10 backends in 7 slots: %d slots, %d backends hold one; want 7, 7", len(small.Slots), len(held))
	}
}

// TestCrossingALimitResizes shows the cost of sizing by the backend count
// alone: removing the 17th backend shrinks the table to the size that
// serves 16, and then most flows of the others move (every node alike, so
// they still agree). The limits in sizes make such removals rare, not
// impossible.
func TestCrossingALimitResizes(t *testing.T) {
	all := endpoints(17)
	before, after := New(all), New(all[:16])
	if len(before.Slots) != 32771 || len(after.Slots) != 16381 {
		t.Fatalf("17 then 16 backends: %d then %d slots; want 32771 then 16381", len(before.Slots), len(after.Slots))
	}
	flows := randomFlows(100_000)
	moved := movedShare(len(flows), all[16], func(i int) (proxy.Endpoint, proxy.Endpoint) {
		h := FlowHash(flows[i])
		a, _ := before.Lookup(h)
		b, _ := after.Lookup(h)
		return a, b
	})
	t.Logf("17 → 16 backends (table resized): %.1f %% of the other flows moved", 100*moved)
	if moved < 0.5 {
		t.Errorf("a resize moved only %.1f %% of the other flows: the sizes' doc is wrong", 100*moved)
	}
}

// TestBalance is a property test: for random endpoint sets of random
// sizes, every backend holds ⌊M/N⌋ or ⌈M/N⌉ slots, since backends take
// turns and each turn takes exactly one slot.
func TestBalance(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	for range 30 {
		n := 1 + r.IntN(2000)
		eps := make([]proxy.Endpoint, n)
		for i := range eps {
			var a [16]byte
			for j := range a {
				a[j] = byte(r.Uint32())
			}
			ip := netip.AddrFrom16(a)
			if r.IntN(2) == 0 {
				ip = netip.AddrFrom4([4]byte(a[:4]))
			}
			eps[i] = proxy.Endpoint{IP: ip, Port: uint16(r.Uint32())}
		}
		checkShares(t, New(eps))
	}
}

// checkShares fails unless every backend of tab holds ⌊M/N⌋ or ⌈M/N⌉
// slots and no slot is empty.
func checkShares(t *testing.T, tab *Table) {
	t.Helper()
	m, n := len(tab.Slots), len(tab.Backends)
	counts := make([]int, n)
	for _, s := range tab.Slots {
		if int(s) >= n {
			t.Fatalf("N=%d M=%d: slot holds backend %d", n, m, s)
		}
		counts[s]++
	}
	lo, hi := m/n, (m+n-1)/n
	for i, c := range counts {
		if c < lo || c > hi {
			t.Fatalf("N=%d M=%d: backend %s holds %d slots; want %d to %d", n, m, tab.Backends[i].AddrPort(), c, lo, hi)
		}
	}
}

// BenchmarkNew builds the table of 1,000 backends: at M=65537, and at the
// size TableSize picks (131071).
func BenchmarkNew(b *testing.B) {
	eps := endpoints(1000)
	b.Run("M=65537/N=1000", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			tab := &Table{Backends: canonical(eps)}
			tab.populate(65537)
		}
	})
	b.Run("TableSize/N=1000", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			New(eps)
		}
	})
}
