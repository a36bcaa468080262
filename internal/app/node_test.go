package app

import (
	"net/netip"
	"slices"
	"testing"

	"github.com/svcproxy/svcproxy/pkg/pipeline/watch"
)

func TestNodeViewPutsBindAddressFirst(t *testing.T) {
	a := netip.MustParseAddr
	v := newNodeView("node-a", a("10.0.0.9"))
	v.hostAddrs = func() []netip.Addr { return []netip.Addr{a("10.0.0.1")} }
	if _, ok := v.get(); ok {
		t.Fatal("node known before the Node was seen")
	}
	v.set(watch.NodeInfo{Name: "node-a", IPs: []netip.Addr{a("10.0.0.1"), a("10.0.0.9"), a("fd00::1")}, Zone: "z1"})
	n, ok := v.get()
	if !ok {
		t.Fatal("node unknown after set")
	}
	if want := []netip.Addr{a("10.0.0.9"), a("10.0.0.1"), a("fd00::1")}; !slices.Equal(n.IPs, want) {
		t.Errorf("IPs = %v, want %v", n.IPs, want)
	}
	if n.Zone != "z1" || n.Name != "node-a" || len(n.HostAddrs) != 1 {
		t.Errorf("node = %+v", n)
	}
	v.setZone("z2")
	if n, _ := v.get(); n.Zone != "z2" {
		t.Errorf("zone after setZone = %q", n.Zone)
	}
}
