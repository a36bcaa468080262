package nodeport

import (
	"maps"
	"net/netip"
	"testing"

	"github.com/svcproxy/svcproxy/pkg/pipeline/desired"
	"github.com/svcproxy/svcproxy/pkg/pipeline/maglev"
	"github.com/svcproxy/svcproxy/pkg/proxy"
)

var (
	nodeIP = netip.MustParseAddr("198.18.0.11")
	epA    = ep(netip.MustParseAddr("198.19.1.2"), 8080)
	epB    = ep(netip.MustParseAddr("198.19.2.2"), 8080)
)

func TestRenderRoutesAndFlags(t *testing.T) {
	cluster := port("web", proxy.TCP, 30080, epA, epB)
	cluster.ExternalIPs = []netip.Addr{netip.MustParseAddr("198.18.100.1")}
	local := port("local", proxy.UDP, 30081, epA)
	local.ExternalLocal = true
	drop := port("drop", proxy.TCP, 30082)
	drop.ExternalLocal = true
	drop.External.Empty = desired.Drop
	reject := port("reject", proxy.TCP, 30083)
	sourced := port("sourced", proxy.TCP, 0, epA)
	sourced.LoadBalancerIPs = []netip.Addr{netip.MustParseAddr("198.18.200.1")}
	sourced.AllowedSources = []netip.Prefix{netip.MustParsePrefix("198.18.0.0/24")}
	affinity := port("affinity", proxy.TCP, 30084, epA)
	affinity.AffinitySeconds = 10
	sctp := port("sctp", proxy.SCTP, 30085, epA)

	st := stateOf(nodeIP, cluster, local, drop, reject, sourced, affinity, sctp)
	st.Masquerade.Mark = 0x4000
	c := Render(st)
	if c.Config.SNAT != nodeIP.As4() || c.Config.Flags != 0 {
		t.Errorf("configuration %+v, want the node's address %v and no flag (the masquerade mark is not the programs': nothing masquerades a local endpoint's flow; a sync never drains)", c.Config, nodeIP)
	}
	want := map[svcKey]uint32{
		frontendKey[[4]byte](nodeIP, 30080, 6):                           flagMasq,
		frontendKey[[4]byte](netip.MustParseAddr("198.18.100.1"), 80, 6): flagMasq,
		frontendKey[[4]byte](nodeIP, 30081, 17):                          0,
		frontendKey[[4]byte](nodeIP, 30082, 6):                           flagDrop,
		frontendKey[[4]byte](nodeIP, 30083, 6):                           flagMasq,
		frontendKey[[4]byte](netip.MustParseAddr("198.18.200.1"), 80, 6): flagMasq | flagRanges,
		frontendKey[[4]byte](nodeIP, 30084, 6):                           flagMasq,
	}
	if len(c.Services) != len(want) {
		t.Errorf("rendered %d frontends, want %d (no SCTP): %v", len(c.Services), len(want), c.Services)
	}
	for k, flags := range want {
		v, ok := c.Services[k]
		if !ok {
			t.Errorf("frontend %v missing", k)
			continue
		}
		if v.Flags != flags {
			t.Errorf("frontend %v: flags %d, want %d", k, v.Flags, flags)
		}
	}
	web := c.Services[frontendKey[[4]byte](nodeIP, 30080, 6)]
	if web.Count != 2 || c.Backends[beKey{ID: web.ID, Slot: 1}].AddrPort() != epB.AddrPort() {
		t.Errorf("web's group: %+v, slot 1 %v; want 2 endpoints, epB second", web, c.Backends[beKey{ID: web.ID, Slot: 1}])
	}
	if len(c.Maglev) != 0 {
		t.Errorf("%d Maglev tables without a Maglev port", len(c.Maglev))
	}
}

// TestRenderSourceRanges: an LB IP with source ranges checks its group's
// prefixes, which are desired's AllowedSources; the same port's node port
// and external IP do not check; ranges that did not parse (an empty list)
// leave the check with no prefix, which drops every source.
func TestRenderSourceRanges(t *testing.T) {
	lb, ext := netip.MustParseAddr("198.18.200.1"), netip.MustParseAddr("198.18.100.1")
	sp := port("sourced", proxy.TCP, 30080, epA)
	sp.LoadBalancerIPs, sp.ExternalIPs = []netip.Addr{lb}, []netip.Addr{ext}
	sp.AllowedSources = []netip.Prefix{netip.MustParsePrefix("198.18.0.0/24"), netip.MustParsePrefix("203.0.113.7/32")}
	closed := port("closed", proxy.TCP, 0, epA)
	closed.LoadBalancerIPs = []netip.Addr{netip.MustParseAddr("198.18.200.2")}
	closed.AllowedSources = []netip.Prefix{}
	open := port("open", proxy.TCP, 0, epA)
	open.LoadBalancerIPs = []netip.Addr{netip.MustParseAddr("198.18.200.3")}

	c := Render(stateOf(nodeIP, sp, closed, open))
	v := c.Services[frontendKey[[4]byte](lb, 80, 6)]
	for k, want := range map[svcKey]bool{frontendKey[[4]byte](lb, 80, 6): true, frontendKey[[4]byte](ext, 80, 6): false,
		frontendKey[[4]byte](nodeIP, 30080, 6): false, frontendKey[[4]byte](netip.MustParseAddr("198.18.200.2"), 80, 6): true,
		frontendKey[[4]byte](netip.MustParseAddr("198.18.200.3"), 80, 6): false} {
		got, ok := c.Services[k]
		if !ok || (got.Flags&flagRanges != 0) != want {
			t.Errorf("frontend %v: %+v (rendered %t), want the ranges flag %t", k, got, ok, want)
		}
	}
	wantRanges := map[srcKey]uint32{
		{Prefixlen: 64 + 24, ID: [2]uint32{uint32(v.ID), uint32(v.ID >> 32)}, Addr: [4]byte{198, 18, 0, 0}}:  1,
		{Prefixlen: 64 + 32, ID: [2]uint32{uint32(v.ID), uint32(v.ID >> 32)}, Addr: [4]byte{203, 0, 113, 7}}: 1,
	}
	if !maps.Equal(c.Ranges, wantRanges) {
		t.Errorf("ranges %v, want %v (sourced's two prefixes alone)", c.Ranges, wantRanges)
	}
}

// TestRenderAffinity: a port with ClientIP affinity carries desired's
// timeout, and its group's endpoints are members; a port without has
// neither.
func TestRenderAffinity(t *testing.T) {
	sticky := port("sticky", proxy.TCP, 30080, epA, epB)
	sticky.AffinitySeconds = 10800
	plain := port("plain", proxy.TCP, 30081, epA)
	c := Render(stateOf(nodeIP, sticky, plain))
	v, p := c.Services[frontendKey[[4]byte](nodeIP, 30080, 6)], c.Services[frontendKey[[4]byte](nodeIP, 30081, 6)]
	if v.Affinity != 10800 || p.Affinity != 0 {
		t.Errorf("affinity timeouts %d and %d, want 10800 and 0", v.Affinity, p.Affinity)
	}
	want := map[memberKey]uint32{memberOf[[4]byte](v.ID, epA): 1, memberOf[[4]byte](v.ID, epB): 1}
	if !maps.Equal(c.Members, want) {
		t.Errorf("members %v, want sticky's two endpoints %v", c.Members, want)
	}
}

// TestRenderMaglevTable: a Maglev port's group has one table entry, of
// the size maglev gives its endpoints, and the table written from it is
// the one maglev builds, whatever order the endpoints come in.
func TestRenderMaglevTable(t *testing.T) {
	sp := port("web", proxy.TCP, 30080, epB, epA, epB)
	sp.ExternalBalancing = proxy.BalanceMaglev
	c := Render(stateOf(nodeIP, sp))
	v := c.Services[frontendKey[[4]byte](nodeIP, 30080, 6)]
	tab := maglev.New([]proxy.Endpoint{epA, epB})
	m, ok := c.Maglev[v.ID]
	if v.Flags&flagMaglev == 0 || int(v.MSize) != len(tab.Slots) || !ok || int(m.Size) != len(tab.Slots) || len(c.Maglev) != 1 {
		t.Fatalf("record %+v with Maglev tables %v, want the flag and one table of %d slots", v, c.Maglev, len(tab.Slots))
	}
	slots := maglevSlots[[4]byte](c.maglevEndpoints[v.ID])
	if len(slots) != len(tab.Slots) {
		t.Fatalf("%d slots written, the table has %d", len(slots), len(tab.Slots))
	}
	for i, b := range tab.Slots {
		if got := slots[i].AddrPort(); got != tab.Backends[b].AddrPort() {
			t.Fatalf("slot %d holds %v, the table says %v", i, got, tab.Backends[b])
		}
	}
	other := port("web", proxy.TCP, 30080, epA, epB)
	other.ExternalBalancing = proxy.BalanceMaglev
	if o := Render(stateOf(nodeIP, other)).Maglev[v.ID]; o != m {
		t.Errorf("the same endpoints in another order render %+v, then %+v", m, o)
	}
}

func TestRenderIsStableAndPerFamily(t *testing.T) {
	st := stateOf(nodeIP, port("a", proxy.TCP, 30080, epA), port("b", proxy.UDP, 30081, epB))
	a, b := Render(st), Render(st)
	if len(a.Services) != 2 {
		t.Fatalf("rendered %v", a.Services)
	}
	for k, v := range a.Services {
		if b.Services[k] != v {
			t.Errorf("frontend %v rendered %+v then %+v", k, v, b.Services[k])
		}
	}
	if c := Render6(st); len(c.Services) != 0 {
		t.Errorf("an IPv4 State rendered into the IPv6 maps: %v", c.Services)
	}
	st.Family = proxy.IPv6
	if c := Render(st); len(c.Services) != 0 {
		t.Errorf("an IPv6 State rendered into the IPv4 maps: %v", c.Services)
	}
}

// TestRenderIPv6: an IPv6 State's node ports on the node's IPv6
// addresses, external and LB IPv6s, the masquerade address (the node's
// first IPv6 address), source ranges of 64 + 128 bits and affinity
// members, all 16-byte; IPv4 addresses in it are not rendered.
func TestRenderIPv6(t *testing.T) {
	node6 := netip.MustParseAddr("fd00:18::11")
	ep6 := ep(netip.MustParseAddr("fd00:19::2"), 8080)
	sp := port("web", proxy.TCP, 30080, ep6)
	sp.ExternalIPs = []netip.Addr{netip.MustParseAddr("fd00:100::1"), netip.MustParseAddr("198.18.100.1")}
	sp.LoadBalancerIPs = []netip.Addr{netip.MustParseAddr("fd00:200::1")}
	sp.AllowedSources = []netip.Prefix{netip.MustParsePrefix("fd00:9::/64")}
	sp.AffinitySeconds = 10
	st := stateOf(node6, sp)
	st.Family = proxy.IPv6
	st.NodeIPs = []netip.Addr{node6, netip.MustParseAddr("fd00:18::12")}
	c := Render6(st)
	if got := netip.AddrFrom16(c.Config.SNAT); got != node6 {
		t.Errorf("masquerade address %v, want the node's first IPv6 address %v", got, node6)
	}
	want := map[svcKeyOf[[16]byte]]uint32{
		frontendKey[[16]byte](node6, 30080, 6):                              flagMasq,
		frontendKey[[16]byte](netip.MustParseAddr("fd00:18::12"), 30080, 6): flagMasq,
		frontendKey[[16]byte](netip.MustParseAddr("fd00:100::1"), 80, 6):    flagMasq,
		frontendKey[[16]byte](netip.MustParseAddr("fd00:200::1"), 80, 6):    flagMasq | flagRanges,
	}
	if len(c.Services) != len(want) {
		t.Errorf("rendered %d frontends, want %d: %v", len(c.Services), len(want), c.Services)
	}
	for k, flags := range want {
		if v, ok := c.Services[k]; !ok || v.Flags != flags {
			t.Errorf("frontend %v: %+v (present %v), want flags %d", netip.AddrFrom16(k.Addr), v, ok, flags)
		}
	}
	id := c.Services[frontendKey[[16]byte](node6, 30080, 6)].ID
	if got := c.Backends[beKey{ID: id}].AddrPort(); got != ep6.AddrPort() {
		t.Errorf("slot 0 is %v, want %v", got, ep6.AddrPort())
	}
	rk := sourceKey[[16]byte](id, netip.MustParsePrefix("fd00:9::/64"))
	if len(c.Ranges) != 1 || c.Ranges[rk] != 1 || rk.Prefixlen != 64+64 {
		t.Errorf("ranges %v, want only %+v", c.Ranges, rk)
	}
	if len(c.Members) != 1 || c.Members[memberOf[[16]byte](id, ep6)] != 1 {
		t.Errorf("affinity members %v, want %v", c.Members, ep6)
	}
}

// TestParseAcceleration: the flag's three values, "" as disabled, and
// nothing else.
func TestParseAcceleration(t *testing.T) {
	for in, want := range map[string]Acceleration{"": AccelerationDisabled, "disabled": AccelerationDisabled,
		"native": AccelerationNative, "best-effort": AccelerationBestEffort} {
		if got, err := ParseAcceleration(in); err != nil || got != want {
			t.Errorf("ParseAcceleration(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, bad := range []string{"generic", "Native", "on"} {
		if got, err := ParseAcceleration(bad); err == nil {
			t.Errorf("ParseAcceleration(%q) = %q, want an error", bad, got)
		}
	}
}
