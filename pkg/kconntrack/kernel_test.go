package kconntrack_test

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/vishvananda/netns"

	"github.com/svcproxy/svcproxy/pkg/kconntrack"
	"github.com/svcproxy/svcproxy/pkg/proxy"
	"github.com/svcproxy/svcproxy/pkg/testing/netnstest"
)

// newClient returns a client whose socket lives in a fresh test namespace.
// It fails (never skips) without root: these tests are the only proof the
// wire format is right.
func newClient(t testing.TB) *kconntrack.Client {
	t.Helper()
	c, _ := newClientIn(t)
	return c
}

// newClientIn is newClient that also returns the namespace.
func newClientIn(t testing.TB) (*kconntrack.Client, *netnstest.NS) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatal("kconntrack kernel tests need root (network namespaces, ctnetlink)")
	}
	lab := netnstest.New(t)
	ns, err := lab.NewNS("ct")
	if err != nil {
		t.Fatal(err)
	}
	h, err := netns.GetFromPath(ns.Path())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	c, err := kconntrack.NewAt(h)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c, ns
}

func ap(s string) netip.AddrPort { return netip.MustParseAddrPort(s) }

// flow is a flow as Create makes it and List reads it back: replied.
func flow(proto uint8, src, dst, replySrc string, zone uint16) kconntrack.Flow {
	s, d, r := ap(src), ap(dst), ap(replySrc)
	return kconntrack.Flow{Proto: proto, Orig: kconntrack.Tuple{Src: s, Dst: d},
		Reply: kconntrack.Tuple{Src: r, Dst: s}, Zone: zone, Replied: true}
}

func list(t *testing.T, c *kconntrack.Client, family proxy.IPFamily) []kconntrack.Flow {
	t.Helper()
	var out []kconntrack.Flow
	if err := c.List(context.Background(), family, func(f kconntrack.Flow) { out = append(out, f) }); err != nil {
		t.Fatalf("list %s: %v", family, err)
	}
	slices.SortFunc(out, func(a, b kconntrack.Flow) int { return a.Orig.Src.Compare(b.Orig.Src) })
	return out
}

func TestCreateListDelete(t *testing.T) {
	c := newClient(t)
	ctx := context.Background()
	v4 := []kconntrack.Flow{
		flow(kconntrack.ProtoUDP, "198.19.1.2:1001", "172.30.0.10:53", "198.19.1.6:5353", 0),
		flow(kconntrack.ProtoUDP, "198.19.1.2:1002", "172.30.0.10:53", "172.30.0.10:53", 0),
		flow(kconntrack.ProtoSCTP, "198.19.1.2:1003", "172.30.0.11:80", "198.19.1.6:8080", 0),
		flow(kconntrack.ProtoTCP, "198.19.1.2:1004", "172.30.0.12:80", "198.19.1.6:8080", 0),
		flow(kconntrack.ProtoUDP, "198.19.1.2:1005", "172.30.0.10:53", "198.19.1.6:5353", 7),
	}
	v6 := []kconntrack.Flow{flow(kconntrack.ProtoUDP, "[fd00:19::2]:1001", "[fd00:30::a]:53", "[fd00:19::6]:5353", 0)}
	c.BatchSize = 2 // several batches, one partial
	if n, err := c.Create(ctx, proxy.IPv4, v4, time.Minute); err != nil || n != len(v4) {
		t.Fatalf("create v4: %d, %v", n, err)
	}
	if n, err := c.Create(ctx, proxy.IPv6, v6, time.Minute); err != nil || n != 1 {
		t.Fatalf("create v6: %d, %v", n, err)
	}
	if got := list(t, c, proxy.IPv4); !slices.Equal(got, v4) {
		t.Fatalf("v4 flows:\n got %v\nwant %v", got, v4)
	}
	if got := list(t, c, proxy.IPv6); !slices.Equal(got, v6) {
		t.Fatalf("v6 flows:\n got %v\nwant %v", got, v6)
	}

	// Deleting the zoned flow needs its zone; a flow already gone counts.
	doomed := []kconntrack.Flow{v4[1], v4[4], v4[2], flow(kconntrack.ProtoUDP, "198.19.1.2:9", "172.30.0.10:53", "172.30.0.10:53", 0)}
	if n, err := c.Delete(ctx, proxy.IPv4, doomed); err != nil || n != len(doomed) {
		t.Fatalf("delete: %d, %v", n, err)
	}
	want := []kconntrack.Flow{v4[0], v4[3]}
	if got := list(t, c, proxy.IPv4); !slices.Equal(got, want) {
		t.Fatalf("after delete:\n got %v\nwant %v", got, want)
	}
	if got := list(t, c, proxy.IPv6); len(got) != 1 {
		t.Fatalf("v6 flows touched by a v4 delete: %v", got)
	}
}

func TestListHonoursContext(t *testing.T) {
	c := newClient(t)
	var flows []kconntrack.Flow
	for i := range 5000 {
		flows = append(flows, flow(kconntrack.ProtoUDP,
			netip.AddrPortFrom(netip.MustParseAddr("198.19.1.2"), uint16(1000+i)).String(), "172.30.0.10:53", "198.19.1.6:53", 0))
	}
	if _, err := c.Create(context.Background(), proxy.IPv4, flows, time.Minute); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	seen := 0
	err := c.List(ctx, proxy.IPv4, func(kconntrack.Flow) {
		seen++
		cancel()
	})
	if !errors.Is(err, context.Canceled) || seen == len(flows) {
		t.Fatalf("cancelled list: err %v after %d flows", err, seen)
	}
	// The client is usable again afterwards.
	if got := list(t, c, proxy.IPv4); len(got) != len(flows) {
		t.Fatalf("after a cancelled dump: %d flows, want %d", len(got), len(flows))
	}
}

// TestListDNATedAsksTheKernelToFilter: a flow the kernel's NAT translated
// is listed; a flow whose tuples differ but that no NAT made (created
// through ctnetlink, which cannot set the NAT status bits) is left out by
// the kernel, which shows the dump was filtered there, not here.
func TestListDNATedAsksTheKernelToFilter(t *testing.T) {
	c, ns := newClientIn(t)
	ctx := context.Background()
	if err := ns.LinkUp("lo"); err != nil {
		t.Fatal(err)
	}
	rules := "table ip t {\n chain out {\n  type nat hook output priority -100\n  udp dport 53 dnat to 127.0.0.1:5353\n }\n}\n"
	if _, err := ns.RunInput(ctx, rules, "nft", "-f", "-"); err != nil {
		t.Fatal(err)
	}
	err := ns.Do(func() error {
		conn, err := net.Dial("udp4", "127.0.0.5:53")
		if err != nil {
			return err
		}
		defer conn.Close()
		_, err = conn.Write([]byte("x"))
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	untranslated := flow(kconntrack.ProtoUDP, "198.19.1.2:1001", "172.30.0.10:53", "198.19.1.6:5353", 0)
	if _, err := c.Create(ctx, proxy.IPv4, []kconntrack.Flow{untranslated}, time.Minute); err != nil {
		t.Fatal(err)
	}
	if all := list(t, c, proxy.IPv4); len(all) != 2 {
		t.Fatalf("want the translated flow and the created one, got %v", all)
	}
	var got []kconntrack.Flow
	if err := c.ListDNATed(ctx, proxy.IPv4, func(f kconntrack.Flow) { got = append(got, f) }); err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0].Orig.Dst != ap("127.0.0.5:53") || got[0].Reply.Src != ap("127.0.0.1:5353") {
		t.Fatalf("ListDNATed: got %v, want only the flow to 127.0.0.5:53 the rule translated", got)
	}
}
