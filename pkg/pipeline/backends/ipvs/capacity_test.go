package ipvs

import (
	"net/netip"
	"testing"

	"github.com/svcproxy/svcproxy/pkg/kipset"
	"github.com/svcproxy/svcproxy/pkg/pipeline/desired"
	"github.com/svcproxy/svcproxy/pkg/proxy"
)

// withSources is an LB port whose firewall lets n single addresses in:
// n members of KUBE-LOAD-BALANCER-SOURCE-CIDR.
func withSources(n int) *desired.ServicePort {
	a := svcPort("a", 1, w4.LocalPod(1))
	a.LoadBalancerIPs = []netip.Addr{w4.LoadBalancerIP(1)}
	for i := range n {
		a.AllowedSources = append(a.AllowedSources, netip.PrefixFrom(netip.AddrFrom4([4]byte{100, 64 + byte(i>>16), byte(i >> 8), byte(i)}), 32))
	}
	return a
}

func setCapacity(t *testing.T, f *fakes, name string) (uint32, int) {
	t.Helper()
	set, ok := f.ipset.Set(name)
	if !ok {
		t.Fatalf("no ipset %s", name)
	}
	entries, _ := f.ipset.ListEntries(name)
	return set.MaxElements, len(entries)
}

// TestSetsSizedFromState: sets are created with upstream's capacity; a set
// adopted at that capacity (upstream made it) grows, before the members
// are added, to hold a State that needs more; a full sync gives it
// upstream's capacity back once it holds at most half of that, and no
// temporary set is left.
func TestSetsSizedFromState(t *testing.T) {
	f := newFakes()
	if err := f.ipset.CreateSet(kipset.Set{Name: setLBSourceCIDR, Type: kipset.HashIPPortNet, Family: kipset.Inet,
		MaxElements: kipset.DefaultMaxElements}); err != nil {
		t.Fatal(err)
	}
	p := newProxier(f, proxy.IPv4, Options{})
	const need = kipset.DefaultMaxElements + 4464 // 70,000
	st := baseState(proxy.IPv4, withSources(need))
	mustSync(t, p, st)
	if c, n := setCapacity(t, f, setLBSourceCIDR); c != 1<<17 || n != need {
		t.Errorf("%s: capacity %d with %d members, want %d with %d", setLBSourceCIDR, c, n, 1<<17, need)
	}
	if c, _ := setCapacity(t, f, setClusterIP); c != kipset.DefaultMaxElements {
		t.Errorf("%s created with capacity %d, want upstream's %d", setClusterIP, c, kipset.DefaultMaxElements)
	}

	// A partial sync that drops most sources keeps the capacity; the
	// next full sync shrinks the set.
	a := withSources(1000)
	st = changed(st, map[proxy.ServicePortName]*desired.ServicePort{a.Name: a})
	mustSync(t, p, st)
	if c, n := setCapacity(t, f, setLBSourceCIDR); c != 1<<17 || n != 1000 {
		t.Errorf("after a partial sync: capacity %d with %d members, want %d with 1000", c, n, 1<<17)
	}
	st.Changed = nil
	mustSync(t, p, st)
	if c, n := setCapacity(t, f, setLBSourceCIDR); c != kipset.DefaultMaxElements || n != 1000 {
		t.Errorf("after a full sync: capacity %d with %d members, want %d with 1000", c, n, kipset.DefaultMaxElements)
	}
	if _, ok := f.ipset.Set(setResizeTmp); ok {
		t.Errorf("%s left behind", setResizeTmp)
	}
}

// TestCapacityFor: upstream's capacity while it suffices, then powers of two.
func TestCapacityFor(t *testing.T) {
	for n, want := range map[int]uint32{0: 65536, 65536: 65536, 65537: 1 << 17, 1 << 17: 1 << 17, 1<<17 + 1: 1 << 18} {
		if got := capacityFor(n); got != want {
			t.Errorf("capacityFor(%d) = %d, want %d", n, got, want)
		}
	}
}
