//go:build ipvsvm

package ipvs_test

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/svcproxy/svcproxy/pkg/kipset"
	"github.com/svcproxy/svcproxy/pkg/kipvs"
	"github.com/svcproxy/svcproxy/pkg/klink"
	"github.com/svcproxy/svcproxy/pkg/testing/netnstest"
)

// The kernel clients the IPVS backend is built on, against the VM's real
// kernel, each in a fresh namespace; ipvsadm and ipset (the binaries) read
// the result back independently of the clients.

func freshNS(t *testing.T, role string) *netnstest.NS {
	t.Helper()
	ns, err := netnstest.New(t).NewNS(role)
	if err != nil {
		t.Fatal(err)
	}
	return ns
}

func run(t *testing.T, ns *netnstest.NS, name string, args ...string) string {
	t.Helper()
	out, err := ns.Run(context.Background(), name, args...)
	if err != nil {
		t.Fatal(err)
	}
	return string(out)
}

func TestVMKipvsServices(t *testing.T) {
	ns := freshNS(t, "kipvs")
	c, err := kipvs.New(ns.Path())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()

	var want []kipvs.Service
	for i, sched := range kipvs.Schedulers {
		for _, a := range []string{"172.30.0.1", "fd00:30::1"} {
			svc := kipvs.Service{
				ServiceKey: kipvs.ServiceKey{Addr: netip.MustParseAddr(a), Protocol: kipvs.TCP, Port: uint16(1000 + i)},
				Scheduler:  sched,
			}
			if err := c.AddService(svc); err != nil {
				t.Errorf("AddService %s (%s): %v", svc.ServiceKey, sched, err)
				continue
			}
			want = append(want, svc)
		}
	}
	for _, proto := range []kipvs.Protocol{kipvs.UDP, kipvs.SCTP} {
		svc := kipvs.Service{
			ServiceKey: kipvs.ServiceKey{Addr: netip.MustParseAddr("172.30.0.2"), Protocol: proto, Port: 53},
			Scheduler:  kipvs.RoundRobin, Flags: kipvs.FlagPersistent, Timeout: 10800,
		}
		if err := c.AddService(svc); err != nil {
			t.Fatalf("AddService %s: %v", svc.ServiceKey, err)
		}
		want = append(want, svc)
	}
	got, err := c.ListServices()
	if err != nil {
		t.Fatal(err)
	}
	sortServices(got)
	sortServices(want)
	if !slices.Equal(got, want) {
		t.Errorf("ListServices:\n got %v\nwant %v", got, want)
	}

	// Duplicates and missing keys map to the shared errors.
	if err := c.AddService(want[0]); !errors.Is(err, kipvs.ErrExists) {
		t.Errorf("AddService twice = %v, want ErrExists", err)
	}
	missing := kipvs.ServiceKey{Addr: netip.MustParseAddr("172.30.9.9"), Protocol: kipvs.TCP, Port: 1}
	if err := c.DeleteService(missing); !errors.Is(err, kipvs.ErrNotFound) {
		t.Errorf("DeleteService(missing) = %v, want ErrNotFound", err)
	}

	// Update: scheduler and persistence change in place.
	upd := want[0]
	upd.Scheduler, upd.Flags, upd.Timeout = kipvs.SourceHashing, kipvs.FlagPersistent, 60
	if err := c.UpdateService(upd); err != nil {
		t.Fatal(err)
	}
	got, _ = c.ListServices()
	if !slices.Contains(got, upd) {
		t.Errorf("after UpdateService %v, listed %v", upd, got)
	}
	adm := run(t, ns, "ipvsadm", "-Ln")
	if !strings.Contains(adm, "UDP  172.30.0.2:53 rr persistent 10800") || !strings.Contains(adm, "[fd00:30::1]:1000") {
		t.Errorf("ipvsadm -Ln does not show the services:\n%s", adm)
	}

	for _, s := range got {
		if err := c.DeleteService(s.ServiceKey); err != nil {
			t.Fatal(err)
		}
	}
	if got, _ := c.ListServices(); len(got) != 0 {
		t.Errorf("services left: %v", got)
	}

	if err := c.SetTimeouts(kipvs.Timeouts{TCP: 900 * time.Second, TCPFin: 120 * time.Second, UDP: 300 * time.Second}); err != nil {
		t.Fatal(err)
	}
	if out := run(t, ns, "ipvsadm", "-Ln", "--timeout"); !strings.Contains(out, "Timeout (tcp tcpfin udp): 900 120 300") {
		t.Errorf("timeouts: %s", out)
	}
}

func sortServices(s []kipvs.Service) {
	slices.SortFunc(s, func(a, b kipvs.Service) int { return strings.Compare(a.String(), b.String()) })
}

func TestVMKipvsDestinations(t *testing.T) {
	ns := freshNS(t, "kipvs-d")
	// Real servers need a route (the kernel refuses unroutable ones).
	peer := freshNS(t, "kipvs-p")
	if err := netnstest.Veth(ns, "eth0", peer, "eth0"); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"198.19.1.1/24", "fd00:19:1::1/64"} {
		if err := ns.AddAddr("eth0", netip.MustParsePrefix(p)); err != nil {
			t.Fatal(err)
		}
	}
	c, err := kipvs.New(ns.Path())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for _, fam := range []struct{ vip, a, b string }{
		{"172.30.0.10", "198.19.1.2", "198.19.1.3"},
		{"fd00:30::10", "fd00:19:1::2", "fd00:19:1::3"},
	} {
		key := kipvs.ServiceKey{Addr: netip.MustParseAddr(fam.vip), Protocol: kipvs.TCP, Port: 80}
		if err := c.AddService(kipvs.Service{ServiceKey: key, Scheduler: kipvs.RoundRobin}); err != nil {
			t.Fatal(err)
		}
		a := kipvs.Destination{Addr: netip.AddrPortFrom(netip.MustParseAddr(fam.a), 8080), Weight: 1}
		b := kipvs.Destination{Addr: netip.AddrPortFrom(netip.MustParseAddr(fam.b), 8080), Weight: 1}
		for _, d := range []kipvs.Destination{a, b} {
			if err := c.AddDestination(key, d); err != nil {
				t.Fatalf("AddDestination %v: %v", d, err)
			}
		}
		if err := c.AddDestination(key, a); !errors.Is(err, kipvs.ErrExists) {
			t.Errorf("AddDestination twice = %v, want ErrExists", err)
		}
		// Note: the kernel accepts a real server without a route here
		// (inet_addr_type() of an unrouted address is RTN_UNICAST), so
		// nothing is asserted about that.
		// Graceful termination: weight 0 keeps the destination listed.
		b.Weight = 0
		if err := c.UpdateDestination(key, b); err != nil {
			t.Fatal(err)
		}
		ds, err := c.ListDestinations(key)
		if err != nil {
			t.Fatal(err)
		}
		var got []kipvs.Destination
		for _, d := range ds {
			got = append(got, d.Destination)
		}
		slices.SortFunc(got, func(x, y kipvs.Destination) int { return x.Addr.Compare(y.Addr) })
		if want := []kipvs.Destination{a, b}; !slices.Equal(got, want) {
			t.Errorf("%s destinations = %v, want %v", key, got, want)
		}
		if err := c.DeleteDestination(key, b.Addr); err != nil {
			t.Fatal(err)
		}
		if err := c.DeleteDestination(key, b.Addr); !errors.Is(err, kipvs.ErrNotFound) {
			t.Errorf("DeleteDestination twice = %v, want ErrNotFound", err)
		}
		if ds, _ := c.ListDestinations(key); len(ds) != 1 {
			t.Errorf("%s: %d destinations after delete, want 1", key, len(ds))
		}
	}
}

// newKipset is a kipset client in a fresh namespace, and the namespace.
func newKipset(t *testing.T, role string) (*kipset.Client, *netnstest.NS) {
	t.Helper()
	ns := freshNS(t, role)
	c, err := kipset.New(ns.Path())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c, ns
}

func TestVMKipsetTypes(t *testing.T) {
	c, ns := newKipset(t, "kipset")
	v4, v6 := netip.MustParseAddr("172.30.0.1"), netip.MustParseAddr("fd00:30::1")
	cases := []struct {
		set     kipset.Set
		entries []kipset.Entry
	}{
		{kipset.Set{Name: "T-HASH-IP", Type: kipset.HashIP, Family: kipset.Inet},
			[]kipset.Entry{{IP: v4}, {IP: netip.MustParseAddr("198.18.100.1")}}},
		{kipset.Set{Name: "T-6-HASH-IP", Type: kipset.HashIP, Family: kipset.Inet6},
			[]kipset.Entry{{IP: v6}}},
		{kipset.Set{Name: "T-IPPORT", Type: kipset.HashIPPort, Family: kipset.Inet},
			[]kipset.Entry{{IP: v4, Protocol: kipset.TCP, Port: 80}, {IP: v4, Protocol: kipset.UDP, Port: 53}, {IP: v4, Protocol: kipset.SCTP, Port: 9}}},
		{kipset.Set{Name: "T-6-IPPORT", Type: kipset.HashIPPort, Family: kipset.Inet6},
			[]kipset.Entry{{IP: v6, Protocol: kipset.TCP, Port: 80}}},
		{kipset.Set{Name: "T-IPPORTIP", Type: kipset.HashIPPortIP, Family: kipset.Inet},
			[]kipset.Entry{{IP: netip.MustParseAddr("198.19.1.2"), Protocol: kipset.TCP, Port: 8080, IP2: netip.MustParseAddr("198.19.1.2")}}},
		{kipset.Set{Name: "T-6-IPPORTIP", Type: kipset.HashIPPortIP, Family: kipset.Inet6},
			[]kipset.Entry{{IP: netip.MustParseAddr("fd00:19::2"), Protocol: kipset.TCP, Port: 8080, IP2: netip.MustParseAddr("fd00:19::2")}}},
		{kipset.Set{Name: "T-IPPORTNET", Type: kipset.HashIPPortNet, Family: kipset.Inet},
			[]kipset.Entry{{IP: v4, Protocol: kipset.TCP, Port: 80, Net: netip.MustParsePrefix("198.18.0.0/24")}}},
		{kipset.Set{Name: "T-6-IPPORTNET", Type: kipset.HashIPPortNet, Family: kipset.Inet6},
			[]kipset.Entry{{IP: v6, Protocol: kipset.TCP, Port: 80, Net: netip.MustParsePrefix("fd00:18::/64")}}},
		{kipset.Set{Name: "T-BITMAP-PORT", Type: kipset.BitmapPort},
			[]kipset.Entry{{Port: 30000}, {Port: 32767}}},
	}
	var names []string
	for _, tc := range cases {
		if err := c.CreateSet(tc.set); err != nil {
			t.Errorf("CreateSet %s (%s %s): %v", tc.set.Name, tc.set.Type, tc.set.Family, err)
			continue
		}
		names = append(names, tc.set.Name)
		for _, e := range tc.entries {
			if err := c.AddEntry(tc.set.Name, e); err != nil {
				t.Errorf("%s: AddEntry %v: %v", tc.set.Name, e, err)
			}
		}
		got, err := c.ListEntries(tc.set.Name)
		if err != nil {
			t.Errorf("%s: ListEntries: %v", tc.set.Name, err)
			continue
		}
		sortEntries(got)
		want := slices.Clone(tc.entries)
		sortEntries(want)
		if !slices.Equal(got, want) {
			t.Errorf("%s entries:\n got %v\nwant %v", tc.set.Name, got, want)
		}
		// The ipset tool sees the same members, and hash sets have the
		// capacity upstream creates them with, so that its create -exist
		// accepts them.
		out := run(t, ns, "ipset", "list", tc.set.Name)
		if tc.set.Type != kipset.BitmapPort && !strings.Contains(out, fmt.Sprintf("maxelem %d", kipset.DefaultMaxElements)) {
			t.Errorf("ipset %s lacks maxelem %d:\n%s", tc.set.Name, kipset.DefaultMaxElements, out)
		}
		for _, e := range tc.entries {
			if !strings.Contains(out, e.String()) {
				t.Errorf("ipset list %s lacks %s:\n%s", tc.set.Name, e, out)
			}
		}
		if err := c.DelEntry(tc.set.Name, tc.entries[0]); err != nil {
			t.Errorf("%s: DelEntry: %v", tc.set.Name, err)
		}
		if got, _ := c.ListEntries(tc.set.Name); len(got) != len(tc.entries)-1 {
			t.Errorf("%s: %d entries after DelEntry, want %d", tc.set.Name, len(got), len(tc.entries)-1)
		}
	}
	if err := c.CreateSet(cases[0].set); !errors.Is(err, kipset.ErrExists) {
		t.Errorf("CreateSet twice = %v, want ErrExists", err)
	}
	listed, err := c.ListSets()
	if err != nil {
		t.Fatal(err)
	}
	var want []kipset.Set
	for _, tc := range cases {
		set := tc.set
		if set.Type != kipset.BitmapPort {
			set.MaxElements = kipset.DefaultMaxElements
		}
		want = append(want, set)
	}
	byName := func(a, b kipset.Set) int { return strings.Compare(a.Name, b.Name) }
	slices.SortFunc(listed, byName)
	slices.SortFunc(want, byName)
	if !slices.Equal(listed, want) {
		t.Errorf("ListSets = %v, want %v", listed, want)
	}
	for _, n := range names {
		if err := c.DestroySet(n); err != nil {
			t.Errorf("DestroySet %s: %v", n, err)
		}
	}
	if err := c.DestroySet(names[0]); !errors.Is(err, kipset.ErrNotFound) {
		t.Errorf("DestroySet(missing) = %v, want ErrNotFound", err)
	}
	if out := strings.TrimSpace(run(t, ns, "ipset", "list", "-n")); out != "" {
		t.Errorf("sets left: %s", out)
	}
}

func sortEntries(es []kipset.Entry) {
	slices.SortFunc(es, func(a, b kipset.Entry) int { return strings.Compare(a.String(), b.String()) })
}

// TestVMKipsetCapacityAndSwap: a hash set refuses a member past its
// capacity with ErrFull; SwapSets exchanges two sets of one type, members
// and capacity, under their names, and refuses sets of different types.
func TestVMKipsetCapacityAndSwap(t *testing.T) {
	c, _ := newKipset(t, "kipset-swap")
	small := kipset.Set{Name: "T-SMALL", Type: kipset.HashIP, Family: kipset.Inet, MaxElements: 4}
	big := kipset.Set{Name: "T-BIG", Type: kipset.HashIP, Family: kipset.Inet, MaxElements: 1 << 17}
	for _, set := range []kipset.Set{small, big, {Name: "T-PORTS", Type: kipset.BitmapPort}} {
		if err := c.CreateSet(set); err != nil {
			t.Fatal(err)
		}
	}
	addr := func(i int) kipset.Entry {
		return kipset.Entry{IP: netip.AddrFrom4([4]byte{10, 0, byte(i >> 8), byte(i)})}
	}
	for i := range 4 {
		if err := c.AddEntry(small.Name, addr(i)); err != nil {
			t.Fatal(err)
		}
	}
	err := c.AddEntry(small.Name, addr(4))
	t.Logf("fifth member of a set of 4: %v", err)
	if !errors.Is(err, kipset.ErrFull) {
		t.Errorf("fifth member of a set of 4: %v, want ErrFull", err)
	}
	if err := c.AddEntry(big.Name, addr(9)); err != nil {
		t.Fatal(err)
	}
	if err := c.SwapSets(big.Name, small.Name); err != nil {
		t.Fatalf("SwapSets: %v", err)
	}
	if got, _ := c.ListEntries(small.Name); !slices.Equal(got, []kipset.Entry{addr(9)}) {
		t.Errorf("%s after the swap: %v, want the other set's member", small.Name, got)
	}
	if got, _ := c.ListEntries(big.Name); len(got) != 4 {
		t.Errorf("%s after the swap: %d members, want 4", big.Name, len(got))
	}
	sets, err := c.ListSets()
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range sets {
		want := map[string]uint32{small.Name: big.MaxElements, big.Name: small.MaxElements}[s.Name]
		if want != 0 && s.MaxElements != want {
			t.Errorf("%s after the swap: capacity %d, want %d", s.Name, s.MaxElements, want)
		}
	}
	if err := c.AddEntry(small.Name, addr(5)); err != nil {
		t.Errorf("adding to the swapped-in larger set: %v", err)
	}
	if err := c.SwapSets(small.Name, "T-PORTS"); err == nil {
		t.Error("SwapSets of hash:ip and bitmap:port succeeded")
	}
}

func TestVMKlinkDummy(t *testing.T) {
	ns := freshNS(t, "klink")
	c, err := klink.New(ns.Path())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for i := 0; i < 2; i++ { // idempotent
		if err := c.EnsureDummy("kube-ipvs0"); err != nil {
			t.Fatalf("EnsureDummy #%d: %v", i+1, err)
		}
	}
	addrs := []netip.Addr{netip.MustParseAddr("172.30.0.10"), netip.MustParseAddr("fd00:30::10"), netip.MustParseAddr("198.18.100.10")}
	for _, a := range append(slices.Clone(addrs), addrs[0]) {
		if err := c.AddAddr("kube-ipvs0", a); err != nil {
			t.Fatalf("AddAddr %s: %v", a, err)
		}
	}
	got, err := c.ListAddrs("kube-ipvs0")
	if err != nil {
		t.Fatal(err)
	}
	slices.SortFunc(got, netip.Addr.Compare)
	want := slices.Clone(addrs)
	slices.SortFunc(want, netip.Addr.Compare)
	if !slices.Equal(got, want) {
		t.Errorf("ListAddrs = %v, want %v", got, want)
	}
	out := run(t, ns, "ip", "-br", "addr", "show", "kube-ipvs0")
	for _, a := range addrs {
		if !strings.Contains(out, a.String()+fmt.Sprintf("/%d", a.BitLen())) {
			t.Errorf("ip addr lacks %s/%d: %s", a, a.BitLen(), out)
		}
	}
	host, err := c.HostAddrs("kube-ipvs0")
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range addrs {
		if slices.Contains(host, a) {
			t.Errorf("HostAddrs(exclude kube-ipvs0) includes %s", a)
		}
	}
	if err := c.DelAddr("kube-ipvs0", addrs[0]); err != nil {
		t.Fatal(err)
	}
	if err := c.DelAddr("kube-ipvs0", addrs[0]); err != nil {
		t.Errorf("DelAddr(absent) = %v, want nil", err)
	}
	if err := c.DeleteLink("kube-ipvs0"); err != nil {
		t.Fatal(err)
	}
	if err := c.DeleteLink("kube-ipvs0"); err != nil {
		t.Errorf("DeleteLink(absent) = %v, want nil", err)
	}
	if _, err := c.ListAddrs("kube-ipvs0"); !errors.Is(err, klink.ErrNotFound) {
		t.Errorf("ListAddrs(absent) = %v, want ErrNotFound", err)
	}
}
