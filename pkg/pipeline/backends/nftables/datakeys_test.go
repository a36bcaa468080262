package nftables

import (
	"net/netip"
	"testing"

	"github.com/svcproxy/svcproxy/pkg/proxy"
)

// TestDataKeys: the keys render makes as data for the address sets, the
// frontend maps, the firewall sets (a source prefix as the range of its
// first to its last address) and the hairpin sets are of one of their
// set's layouts and spell as nft spells them (every protocol, both
// families); a key of a set whose keys are spelled stays as it is.
func TestDataKeys(t *testing.T) {
	addr := func(s string) []byte { return appendAddrData(nil, netip.MustParseAddr(s)) }
	allow := func(lb string, p proxy.Protocol, port uint16, src string) []byte {
		return appendAllowKey(nil, string(appendPortData(addr(lb), p, port)), netip.MustParsePrefix(src))
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
		{setFirewallAllow, allow("192.0.2.3", proxy.TCP, 80, "203.0.113.0/24"), "192.0.2.3 . tcp . 80 . 203.0.113.0/24"},
		{setFirewallAllow, allow("192.0.2.3", proxy.TCP, 80, "203.0.113.77/24"), "192.0.2.3 . tcp . 80 . 203.0.113.0/24"},
		{setFirewallAllow, allow("192.0.2.3", proxy.SCTP, 80, "203.0.113.7/32"), "192.0.2.3 . sctp . 80 . 203.0.113.7"},
		{setFirewallAllow, allow("192.0.2.3", proxy.TCP, 80, "0.0.0.0/0"), "192.0.2.3 . tcp . 80 . 0.0.0.0/0"},
		{setFirewallAllow, allow("192.0.2.3", proxy.TCP, 80, "10.1.2.0/23"), "192.0.2.3 . tcp . 80 . 10.1.2.0/23"},
		{setFirewallAllow, allow("192.0.2.3", proxy.TCP, 80, "::ffff:10.1.0.0/112"), "192.0.2.3 . tcp . 80 . 10.1.0.0/16"},
		{setFirewallAllow, allow("2001:db8::3", proxy.UDP, 53, "2001:db8:1::/61"), "2001:db8::3 . udp . 53 . 2001:db8:1::/61"},
		{setFirewallAllow, allow("2001:db8::3", proxy.UDP, 53, "2001:db8:1::9/128"), "2001:db8::3 . udp . 53 . 2001:db8:1::9"},
		{"internal-endpoints-10-s0", []byte("10.0.0.1 . tcp . 80 . 0"), "10.0.0.1 . tcp . 80 . 0"},
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
