package kipset

import (
	"errors"
	"net/netip"
	"testing"
)

func TestEntryString(t *testing.T) {
	ip := netip.MustParseAddr("10.0.1.1")
	cases := []struct {
		e    Entry
		want string
	}{
		{Entry{IP: ip}, "10.0.1.1"},
		{Entry{IP: ip, Protocol: TCP, Port: 80}, "10.0.1.1,tcp:80"},
		{Entry{IP: ip, Protocol: UDP, Port: 53, IP2: ip}, "10.0.1.1,udp:53,10.0.1.1"},
		{Entry{IP: ip, Protocol: SCTP, Port: 9, Net: netip.MustParsePrefix("203.0.113.0/24")}, "10.0.1.1,sctp:9,203.0.113.0/24"},
		{Entry{Port: 30080}, "30080"},
	}
	for _, c := range cases {
		if got := c.e.String(); got != c.want {
			t.Errorf("%+v: got %q, want %q", c.e, got, c.want)
		}
	}
}

func TestFakeSemantics(t *testing.T) {
	f := NewFake()
	set := Set{Name: "KUBE-CLUSTER-IP", Type: HashIPPort, Family: Inet}
	if err := f.CreateSet(set); err != nil {
		t.Fatal(err)
	}
	if err := f.CreateSet(set); !errors.Is(err, ErrExists) {
		t.Errorf("second create: %v", err)
	}
	e := Entry{IP: netip.MustParseAddr("172.30.0.1"), Protocol: TCP, Port: 80}
	for range 2 { // idempotent, like the kernel without NLM_F_EXCL
		if err := f.AddEntry(set.Name, e); err != nil {
			t.Fatal(err)
		}
	}
	if err := f.AddEntry(set.Name, Entry{IP: netip.MustParseAddr("172.30.0.1")}); err == nil {
		t.Error("entry without a port accepted in hash:ip,port")
	}
	if err := f.AddEntry(set.Name, Entry{IP: netip.MustParseAddr("fd00::1"), Protocol: TCP, Port: 80}); err == nil {
		t.Error("IPv6 entry accepted in an inet set")
	}
	if !f.Has(set.Name, e) || f.Writes() != 2 {
		t.Errorf("has=%v writes=%d, want true and 2", f.Has(set.Name, e), f.Writes())
	}
	f.InUse[set.Name] = true
	if err := f.DestroySet(set.Name); !errors.Is(err, ErrInUse) {
		t.Errorf("destroy in use: %v", err)
	}
	delete(f.InUse, set.Name)
	if err := f.DelEntry(set.Name, e); err != nil || f.Has(set.Name, e) {
		t.Errorf("del: %v", err)
	}
	if err := f.DestroySet(set.Name); err != nil {
		t.Fatal(err)
	}
	if err := f.DestroySet(set.Name); !errors.Is(err, ErrNotFound) {
		t.Errorf("destroy twice: %v", err)
	}
}

func TestNetlinkConversionRoundTrip(t *testing.T) {
	ip := netip.MustParseAddr("fd00:10::1:1")
	cases := []struct {
		t Type
		e Entry
	}{
		{HashIPPortIP, Entry{IP: ip, Protocol: TCP, Port: 8080, IP2: ip}},
		{HashIPPortNet, Entry{IP: ip, Protocol: UDP, Port: 53, Net: netip.MustParsePrefix("2001:db8::/64")}},
		{HashIPPort, Entry{IP: netip.MustParseAddr("10.0.0.1"), Protocol: SCTP, Port: 9}},
		{HashIP, Entry{IP: ip}},
	}
	for _, c := range cases {
		if got := fromNetlink(c.t, *toNetlink(c.e)); got != c.e {
			t.Errorf("%s: %v round-tripped to %v", c.t, c.e, got)
		}
	}
}

// TestFakeCapacityAndSwap: like the kernel, the Fake's hash sets refuse a
// member past their capacity (upstream's by default), and SwapSets
// exchanges two sets of one type and family, members and capacity.
func TestFakeCapacityAndSwap(t *testing.T) {
	f := NewFake()
	small := Set{Name: "SMALL", Type: HashIP, Family: Inet, MaxElements: 2}
	for _, set := range []Set{small, {Name: "DEFAULT", Type: HashIP, Family: Inet}, {Name: "PORTS", Type: BitmapPort}} {
		if err := f.CreateSet(set); err != nil {
			t.Fatal(err)
		}
	}
	addr := func(i byte) Entry { return Entry{IP: netip.AddrFrom4([4]byte{10, 0, 0, i})} }
	for i := range byte(2) {
		if err := f.AddEntry(small.Name, addr(i)); err != nil {
			t.Fatal(err)
		}
	}
	if err := f.AddEntry(small.Name, addr(0)); err != nil {
		t.Errorf("re-adding a member of a full set: %v", err)
	}
	if err := f.AddEntry(small.Name, addr(2)); !errors.Is(err, ErrFull) {
		t.Errorf("third member of a set of 2: %v, want ErrFull", err)
	}
	if err := f.SwapSets("DEFAULT", small.Name); err != nil {
		t.Fatal(err)
	}
	sets, _ := f.ListSets()
	got := map[string]uint32{}
	for _, s := range sets {
		got[s.Name] = s.MaxElements
	}
	if got[small.Name] != DefaultMaxElements || got["DEFAULT"] != 2 {
		t.Errorf("capacities after the swap: %v", got)
	}
	if f.Has(small.Name, addr(0)) || !f.Has("DEFAULT", addr(0)) {
		t.Error("members did not follow the swap")
	}
	if err := f.AddEntry(small.Name, addr(2)); err != nil {
		t.Errorf("adding to the swapped-in set: %v", err)
	}
	if err := f.SwapSets(small.Name, "PORTS"); err == nil {
		t.Error("swapped a hash:ip with a bitmap:port set")
	}
}
