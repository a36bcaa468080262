package nftables

import (
	"net/netip"
	"testing"

	"github.com/svcproxy/svcproxy/pkg/proxy"
)

// TestDataKeys: the keys render makes as data for the address sets, the
// frontend maps and the hairpin sets are of one of their set's layouts and
// spell as nft spells them (every protocol, both families); a key of a set
// whose keys are spelled stays as it is.
func TestDataKeys(t *testing.T) {
	addr := func(s string) []byte { return appendAddrData(nil, netip.MustParseAddr(s)) }
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
		{setFirewallAllow, []byte("10.0.0.1 . tcp . 80 . 10.1.0.0/16"), "10.0.0.1 . tcp . 80 . 10.1.0.0/16"},
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
