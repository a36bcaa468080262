package nftables

import (
	"context"
	"maps"
	"net/netip"
	"slices"
	"testing"

	"github.com/svcproxy/svcproxy/pkg/knft"

	"github.com/svcproxy/svcproxy/pkg/pipeline/desired"
	"github.com/svcproxy/svcproxy/pkg/proxy"
	"github.com/svcproxy/svcproxy/pkg/testing/proxytest"
)

// TestDataKeys: the keys render makes as data for the address sets, the
// frontend maps, the firewall sets (a source prefix as the range of its
// first to its last address) and the hairpin sets are of one of their
// set's layouts and spell as nft spells them (every protocol, both
// families); a key of a set whose keys are spelled stays as it is.
func TestDataKeys(t *testing.T) {
	addr := func(s string) []byte { return appendAddrData(nil, netip.MustParseAddr(s)) }
	allow := func(lb string, p proxy.Protocol, port uint16, src string) []byte {
		return appendAllowKey(nil, allowFrontend(string(appendPortData(addr(lb), p, port))), netip.MustParsePrefix(src))
	}
	for _, c := range []struct {
		set     string
		key     []byte
		spelled string
	}{
		{setClusterIPs, addr("172.30.0.1"), "172.30.0.1"},
		{setClusterIPs, addr("::ffff:172.30.0.1"), "172.30.0.1"},
		{setNodePortIPs, addr("fd00::1"), "fd00::1"},
		{mapServiceIPs, appendPortData(addr("10.96.0.10"), proxy.UDP, 53), "10.96.0.10 . udp . 53"},
		{mapServiceIPs, appendPortData(addr("fd00::a"), proxy.TCP, 443), "fd00::a . tcp . 443"},
		{mapServiceNodePorts, appendPortData(nil, proxy.SCTP, 30080), "sctp . 30080"},
		{mapLocalhostReject, appendPortData(nil, proxy.TCP, 65535), "tcp . 65535"},
		{hairpinSets[2], appendHairpinKey(nil, netip.MustParseAddr("10.0.0.1")), "10.0.0.1 . 10.0.0.1"},
		{mapServiceIPs, nil, "*"}, // a catch-all read back
		{setFirewallGuards, appendPortData(addr("192.0.2.3"), proxy.TCP, 80), "192.0.2.3 . tcp . 80"},
		{setFirewallGuards, appendPortData(addr("2001:db8::3"), proxy.UDP, 53), "2001:db8::3 . udp . 53"},
		{firewallAllowSet(proxy.TCP), allow("192.0.2.3", proxy.TCP, 80, "203.0.113.0/24"), "192.0.2.3 . 80 . 203.0.113.0/24"},
		{firewallAllowSet(proxy.TCP), allow("192.0.2.3", proxy.TCP, 80, "203.0.113.77/24"), "192.0.2.3 . 80 . 203.0.113.0/24"},
		{firewallAllowSet(proxy.SCTP), allow("192.0.2.3", proxy.SCTP, 80, "203.0.113.7/32"), "192.0.2.3 . 80 . 203.0.113.7"},
		{firewallAllowSet(proxy.TCP), allow("192.0.2.3", proxy.TCP, 80, "0.0.0.0/0"), "192.0.2.3 . 80 . 0.0.0.0/0"},
		{firewallAllowSet(proxy.TCP), allow("192.0.2.3", proxy.TCP, 80, "10.1.2.0/23"), "192.0.2.3 . 80 . 10.1.2.0/23"},
		{firewallAllowSet(proxy.TCP), allow("192.0.2.3", proxy.TCP, 80, "::ffff:10.1.0.0/112"), "192.0.2.3 . 80 . 10.1.0.0/16"},
		{firewallAllowSet(proxy.UDP), allow("2001:db8::3", proxy.UDP, 53, "2001:db8:1::/61"), "2001:db8::3 . 53 . 2001:db8:1::/61"},
		{firewallAllowSet(proxy.UDP), allow("2001:db8::3", proxy.UDP, 53, "2001:db8:1::9/128"), "2001:db8::3 . 53 . 2001:db8:1::9"},
		{"no-endpoint-services", []byte("10.0.0.1 . tcp . 80"), "10.0.0.1 . tcp . 80"},
	} {
		_, data := dataLayouts[c.set]
		if l := keyLayout(c.set, string(c.key)); (l != nil) != data {
			t.Errorf("%s %x: layout %v, want one: %v", c.set, c.key, l, data)
		}
		if got := spellKey(c.set, string(c.key)); got != c.spelled {
			t.Errorf("%s %x: spelled %q, want %q", c.set, c.key, got, c.spelled)
		}
	}
}

// TestEndpointMapData: an endpoint map's element, made by render as data
// (a slot group's frontend, the same bytes as its service-ips or
// service-nodeports key, then the slot; the endpoint's address · port),
// is of the map's layout in its family and frontend kind and spells as
// nft spells it: the slot in host byte order, a port in network order.
func TestEndpointMapData(t *testing.T) {
	addr := func(s string) []byte { return appendAddrData(nil, netip.MustParseAddr(s)) }
	ep := func(s string) string {
		ap := netip.MustParseAddrPort(s)
		return string(appendEndpointData(nil, desired.Endpoint{IP: ap.Addr(), Port: ap.Port()}))
	}
	for _, c := range []struct {
		set          string
		family       proxy.IPFamily
		frontend     []byte
		slot         int
		value        string
		key, spelled string
	}{
		{"internal-endpoints-10-s0", proxy.IPv4, appendPortData(addr("172.30.0.1"), proxy.TCP, 80), 3, ep("10.244.0.1:8080"),
			"172.30.0.1 . tcp . 80 . 3", "10.244.0.1 . 8080"},
		{"external-endpoints-local-2-s7", proxy.IPv4, appendPortData(addr("192.0.2.1"), proxy.SCTP, 65535), 1, ep("[::ffff:10.0.0.2]:1"),
			"192.0.2.1 . sctp . 65535 . 1", "10.0.0.2 . 1"},
		{"external-nodeport-endpoints-300-s1", proxy.IPv4, appendPortData(nil, proxy.UDP, 30053), 299, ep("10.0.0.3:53"),
			"udp . 30053 . 299", "10.0.0.3 . 53"},
		{"internal-endpoints-2-s3", proxy.IPv6, appendPortData(addr("fd00::1"), proxy.TCP, 443), 1, ep("[fd00:10::1]:8443"),
			"fd00::1 . tcp . 443 . 1", "fd00:10::1 . 8443"},
		{"cluster-nodeport-endpoints-1-s0", proxy.IPv6, appendPortData(nil, proxy.TCP, 30000), 0, ep("[2001:db8::9]:80"),
			"tcp . 30000 . 0", "2001:db8::9 . 80"},
	} {
		l := epMapLayout(c.set, c.family)
		if l == nil {
			t.Fatalf("%s: no endpoint map layout", c.set)
		}
		key := slotElemKey(string(c.frontend), c.slot)
		if l.KeyLen() != len(key) {
			t.Errorf("%s: key of %d bytes, the layout's %d", c.set, len(key), l.KeyLen())
		}
		k, v, err := l.SpellElem(key, c.value)
		if err != nil || k != c.key || v != c.spelled {
			t.Errorf("%s: spelled %q : %q (%v), want %q : %q", c.set, k, v, err, c.key, c.spelled)
		}
		if f, slot, ok := splitSlotKey([]byte(key)); !ok || string(f) != string(c.frontend) || slot != c.slot {
			t.Errorf("%s: key split into %x, %d, %v", c.set, f, slot, ok)
		}
	}
	if l := epMapLayout(hairpinSets[0], proxy.IPv4); l != nil {
		t.Errorf("the hairpin set has an endpoint map's layout")
	}
}

// layoutRecorder is a knft.Interface that records the sets of the element
// units that come spelled (without a Layout).
type layoutRecorder struct {
	knft.Interface
	spelled map[string]bool
}

func (r *layoutRecorder) Apply(ctx context.Context, txs [][]*knft.Unit) (knft.Stats, error) {
	for _, tx := range txs {
		for _, u := range tx {
			if u.Elems != nil && u.Layout == nil {
				r.spelled[u.Set] = true
			}
		}
	}
	return r.Interface.Apply(ctx, txs)
}

// TestElementUnitsAreData: every element change the backend sends is data
// (a unit with a Layout, which knft copies into netlink attributes): the
// elements of every shared case in both families, written cold and then
// changed into the next case's (adds, deletes, new values, moved slots).
func TestElementUnitsAreData(t *testing.T) {
	cases := proxytest.Cases()
	for _, family := range proxy.Families {
		rec := &layoutRecorder{Interface: fakeKernel(newStrictFake(specFor(family).family)), spelled: map[string]bool{}}
		p := NewWithInterface(family, rec)
		for i := range cases {
			for _, c := range []proxytest.Case{cases[i], cases[(i+1)%len(cases)]} {
				st := proxytest.BuildState(t, c, family)
				full := *st
				full.Changed = nil
				if err := p.Sync(context.Background(), &full, proxy.FullSync); err != nil {
					t.Fatalf("%s / %s: %v", family, c.Name, err)
				}
			}
		}
		if len(rec.spelled) != 0 {
			t.Errorf("%s: element units of %v came spelled", family, slices.Sorted(maps.Keys(rec.spelled)))
		}
	}
}
