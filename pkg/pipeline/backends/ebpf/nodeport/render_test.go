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
	if c.Config.SNAT != nodeIP.As4() || c.Config.MasqMark != 0 {
		t.Errorf("configuration %+v, want the node's address %v and no masquerade mark (nothing masquerades a local endpoint's flow)", c.Config, nodeIP)
	}
	want := map[svcKey]uint32{
		frontendKey(nodeIP, 30080, 6):                           flagMasq,
		frontendKey(netip.MustParseAddr("198.18.100.1"), 80, 6): flagMasq,
		frontendKey(nodeIP, 30081, 17):                          0,
		frontendKey(nodeIP, 30082, 6):                           flagDrop,
		frontendKey(nodeIP, 30083, 6):                           flagMasq,
		frontendKey(netip.MustParseAddr("198.18.200.1"), 80, 6): flagMasq | flagRanges,
		frontendKey(nodeIP, 30084, 6):                           flagMasq,
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
	web := c.Services[frontendKey(nodeIP, 30080, 6)]
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
	v := c.Services[frontendKey(lb, 80, 6)]
	for k, want := range map[svcKey]bool{frontendKey(lb, 80, 6): true, frontendKey(ext, 80, 6): false,
		frontendKey(nodeIP, 30080, 6): false, frontendKey(netip.MustParseAddr("198.18.200.2"), 80, 6): true,
		frontendKey(netip.MustParseAddr("198.18.200.3"), 80, 6): false} {
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
	v, p := c.Services[frontendKey(nodeIP, 30080, 6)], c.Services[frontendKey(nodeIP, 30081, 6)]
	if v.Affinity != 10800 || p.Affinity != 0 {
		t.Errorf("affinity timeouts %d and %d, want 10800 and 0", v.Affinity, p.Affinity)
	}
	want := map[memberKey]uint32{memberOf(v.ID, epA): 1, memberOf(v.ID, epB): 1}
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
	v := c.Services[frontendKey(nodeIP, 30080, 6)]
	tab := maglev.New([]proxy.Endpoint{epA, epB})
	m, ok := c.Maglev[v.ID]
	if v.Flags&flagMaglev == 0 || int(v.MSize) != len(tab.Slots) || !ok || int(m.Size) != len(tab.Slots) || len(c.Maglev) != 1 {
		t.Fatalf("record %+v with Maglev tables %v, want the flag and one table of %d slots", v, c.Maglev, len(tab.Slots))
	}
	slots := maglevSlots(c.maglevEndpoints[v.ID])
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

func TestRenderIsStableAndIPv4Only(t *testing.T) {
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
	st.Family = proxy.IPv6
	if c := Render(st); len(c.Services) != 0 {
		t.Errorf("an IPv6 State rendered %v: the tc path is IPv4 only", c.Services)
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
