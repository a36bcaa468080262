package netnstest

import (
	"net/netip"
	"testing"

	"golang.org/x/sys/unix"
)

// TestAddAddrRoutesLocallyOnReturn: once AddAddr returns, packets to the
// IPv6 address it added are delivered on the spot. The kernel adds the
// address's local route from a work queue, often after the netlink call
// returned; a TCP connection to the address made in between sent its SYN
// out of the link to a neighbour that never answered, and timed out
// (TestClientInCgroup, on a loaded machine).
func TestAddAddrRoutesLocallyOnReturn(t *testing.T) {
	requireKernel(t)
	lab := New(t)
	for i := range 20 {
		a, err := lab.NewNS("a" + string(rune('a'+i)))
		if err != nil {
			t.Fatal(err)
		}
		b, err := lab.NewNS("b" + string(rune('a'+i)))
		if err != nil {
			t.Fatal(err)
		}
		if err := Veth(a, "a0", b, "b0"); err != nil {
			t.Fatal(err)
		}
		addr := netip.MustParseAddr("fd00:19:1::2")
		if err := b.AddAddr("b0", netip.PrefixFrom(addr, 64)); err != nil {
			t.Fatal(err)
		}
		routes, err := b.nl.RouteGet(addr.AsSlice())
		if err != nil || len(routes) == 0 || routes[0].Type != unix.RTN_LOCAL {
			t.Fatalf("attempt %d: the route to %s right after AddAddr is %v (%v), want a local one", i, addr, routes, err)
		}
	}
}
