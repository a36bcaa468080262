package desired

import (
	"net/netip"
	"slices"
	"testing"

	"github.com/svcproxy/svcproxy/pkg/pipeline/model"
	"github.com/svcproxy/svcproxy/pkg/proxy"
)

func TestNodePortSelection(t *testing.T) {
	tests := []struct {
		name    string
		entries []string
		family  proxy.IPFamily
		node    Node
		want    NodePortAddrs
	}{
		{"unset means all", nil, proxy.IPv4, testNode, NodePortAddrs{All: true}},
		{"empty means all", []string{}, proxy.IPv6, testNode, NodePortAddrs{All: true}},
		{"all keyword", []string{"all"}, proxy.IPv4, testNode, NodePortAddrs{All: true}},
		{"zero cidr v4", []string{"0.0.0.0/0"}, proxy.IPv4, testNode, NodePortAddrs{All: true}},
		{"zero cidr v6", []string{"::/0"}, proxy.IPv6, testNode, NodePortAddrs{All: true}},
		{"cidr selects host addrs", []string{"192.168.1.0/24"}, proxy.IPv4, testNode,
			NodePortAddrs{IPs: addrs("192.168.1.2")}},
		{"wide cidr selects several, sorted", []string{"192.168.0.0/16"}, proxy.IPv4, testNode,
			NodePortAddrs{IPs: addrs("192.168.0.2", "192.168.1.2")}},
		{"cidr matching nothing", []string{"10.99.0.0/16"}, proxy.IPv4, testNode, NodePortAddrs{}},
		{"only other family means all", []string{"192.168.0.0/16"}, proxy.IPv6, testNode,
			NodePortAddrs{All: true}},
		{"v6 cidr", []string{"192.168.0.0/16", "fd00:2::/64"}, proxy.IPv6, testNode,
			NodePortAddrs{IPs: addrs("fd00:2::2")}},
		{"primary v4", []string{"primary"}, proxy.IPv4, testNode, NodePortAddrs{IPs: addrs("192.168.0.2")}},
		{"primary v6", []string{"primary"}, proxy.IPv6, testNode, NodePortAddrs{IPs: addrs("fd00:1::2")}},
		{"primary without node IP of family means all", []string{"primary"}, proxy.IPv6,
			Node{Name: "n", IPs: addrs("192.168.0.2")}, NodePortAddrs{All: true}},
		// Upstream's "primary" becomes a host CIDR, matched against local
		// addresses like any CIDR: a node IP not on the host serves nothing.
		{"primary not on a local interface serves nothing", []string{"primary"}, proxy.IPv4,
			Node{Name: "n", IPs: addrs("192.168.9.9"), HostAddrs: addrs("192.168.0.2")}, NodePortAddrs{}},
		{"localhost v4", []string{"localhost"}, proxy.IPv4, testNode, NodePortAddrs{IPs: addrs("127.0.0.1")}},
		{"localhost v6", []string{"localhost"}, proxy.IPv6, testNode, NodePortAddrs{IPs: addrs("::1")}},
		{"union without duplicates", []string{"192.168.0.2/32", "primary", "127.0.0.0/8"}, proxy.IPv4, testNode,
			NodePortAddrs{IPs: addrs("127.0.0.1", "192.168.0.2")}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := nodePortSelection(tt.entries, tt.family, tt.node)
			if got.All != tt.want.All || !slices.Equal(got.IPs, tt.want.IPs) {
				t.Errorf("nodePortSelection(%q, %s) = %+v, want %+v", tt.entries, tt.family, got, tt.want)
			}
		})
	}
}

func TestMasquerade(t *testing.T) {
	tests := []struct {
		name   string
		edit   func(*Options)
		family proxy.IPFamily
		want   Masquerade
	}{
		{"default mode is cluster CIDR", nil, proxy.IPv4,
			Masquerade{Mark: 0x4000, Local: LocalDetector{Mode: LocalCIDR, CIDRs: prefixes("10.0.0.0/16")}}},
		{"cluster CIDR of v6", func(o *Options) { o.DetectLocalMode = "ClusterCIDR" }, proxy.IPv6,
			Masquerade{Mark: 0x4000, Local: LocalDetector{Mode: LocalCIDR, CIDRs: prefixes("fd00:10::/64")}}},
		{"no cluster CIDR of family is a no-op detector", func(o *Options) { o.ClusterCIDRs = prefixes("10.0.0.0/16") },
			proxy.IPv6, Masquerade{Mark: 0x4000}},
		{"node CIDR", func(o *Options) { o.DetectLocalMode = "NodeCIDR" }, proxy.IPv4,
			Masquerade{Mark: 0x4000, Local: LocalDetector{Mode: LocalCIDR, CIDRs: prefixes("10.0.1.0/24")}}},
		{"bridge", func(o *Options) { o.DetectLocalMode = "BridgeInterface"; o.BridgeInterface = "cbr0" }, proxy.IPv4,
			Masquerade{Mark: 0x4000, Local: LocalDetector{Mode: LocalInterface, Interface: "cbr0"}}},
		{"prefix", func(o *Options) { o.DetectLocalMode = "InterfaceNamePrefix"; o.InterfaceNamePrefix = "veth" }, proxy.IPv6,
			Masquerade{Mark: 0x4000, Local: LocalDetector{Mode: LocalInterfacePrefix, Interface: "veth"}}},
		{"masqueradeAll and bit", func(o *Options) { o.MasqueradeAll = true; o.MasqueradeBit = 0 }, proxy.IPv4,
			Masquerade{Mark: 1, All: true, Local: LocalDetector{Mode: LocalCIDR, CIDRs: prefixes("10.0.0.0/16")}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			opts := v4Options()
			opts.Family = tt.family
			if tt.edit != nil {
				tt.edit(&opts)
			}
			got := Compute(nil, snapshot(tt.family), model.Changes{}, testNode, opts).Masquerade
			if got.Mark != tt.want.Mark || got.All != tt.want.All || got.Local.Mode != tt.want.Local.Mode ||
				got.Local.Interface != tt.want.Local.Interface || !slices.Equal(got.Local.CIDRs, tt.want.Local.CIDRs) {
				t.Errorf("Masquerade = %+v, want %+v", got, tt.want)
			}
		})
	}
}

func TestAllowedSources(t *testing.T) {
	lb := addrs("1.2.3.4")
	tests := []struct {
		name    string
		ranges  []netip.Prefix
		invalid bool // an entry did not parse
		lbIPs   []netip.Addr
		want    []netip.Prefix
	}{
		{"no ranges", nil, false, lb, nil},
		{"no LB IPs", prefixes("203.0.113.0/24"), false, nil, nil},
		{"other family only", prefixes("2001:db8::/64"), false, lb, nil},
		{"ranges masked and sorted", prefixes("203.0.113.9/24", "198.51.100.0/24"), false, lb,
			prefixes("198.51.100.0/24", "203.0.113.0/24")},
		{"node inside a range adds the LB IPs", prefixes("192.168.0.0/16"), false, addrs("1.2.3.4", "1.2.3.5"),
			prefixes("1.2.3.4/32", "1.2.3.5/32", "192.168.0.0/16")},
		// Interval sets refuse overlapping elements ("File exists"): one
		// Service's nested ranges stopped every sync of the node.
		{"nested and duplicate ranges keep the outer one", prefixes("10.1.0.0/16", "10.0.0.0/8", "10.1.2.0/24", "10.0.0.0/8", "11.0.0.0/8"),
			false, lb, prefixes("10.0.0.0/8", "11.0.0.0/8")},
		{"LB IP inside a range with the node is not added again", prefixes("1.0.0.0/8", "192.168.0.0/16"), false, addrs("1.2.3.4", "9.9.9.9"),
			prefixes("1.0.0.0/8", "9.9.9.9/32", "192.168.0.0/16")},
		{"a /0 range means no firewall", prefixes("203.0.113.0/24", "0.0.0.0/0"), false, lb, nil},
		{"asked for but none parsed: fail closed", nil, true, lb, []netip.Prefix{}},
		{"asked for, only the other family parsed: fail closed", prefixes("2001:db8::/64"), true, lb, []netip.Prefix{}},
		{"a valid range wins over an invalid one", prefixes("203.0.113.0/24"), true, lb, prefixes("203.0.113.0/24")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sp := &model.ServicePort{SourceRanges: tt.ranges, SourceRangesInvalid: tt.invalid}
			got := allowedSources(sp, tt.lbIPs, proxy.IPv4, addrs("192.168.0.2"))
			if !slices.Equal(got, tt.want) || (got == nil) != (tt.want == nil) {
				t.Errorf("allowedSources = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestFrontendsPerFamily(t *testing.T) {
	dual := svcPort("dual", addrs("172.30.0.1", "fd00:172:30::1"), func(sp *model.ServicePort) {
		sp.NodePort = 30080
		sp.ExternalIPs = addrs("203.0.113.20", "2001:db8::20", "203.0.113.10")
		sp.LoadBalancerIPs = addrs("2001:db8::30", "198.51.100.30")
		sp.SourceRanges = prefixes("198.51.100.0/24", "2001:db8::/64")
	})
	v6only := svcPort("v6only", addrs("fd00:172:30::2"), nil)
	for _, tt := range []struct {
		family            proxy.IPFamily
		clusterIP         string
		external, lb      []netip.Addr
		ranges            []netip.Prefix
		wantV6OnlyPresent bool
	}{
		{proxy.IPv4, "172.30.0.1", addrs("203.0.113.10", "203.0.113.20"), addrs("198.51.100.30"),
			prefixes("198.51.100.0/24"), false},
		{proxy.IPv6, "fd00:172:30::1", addrs("2001:db8::20"), addrs("2001:db8::30"),
			prefixes("2001:db8::/64"), true},
	} {
		t.Run(string(tt.family), func(t *testing.T) {
			opts := v4Options()
			opts.Family = tt.family
			st := Compute(nil, snapshot(tt.family, snapEntry{sp: dual}, snapEntry{sp: v6only}), model.Changes{}, testNode, opts)
			sp := st.Service(dual.Name)
			if sp == nil {
				t.Fatalf("dual-stack port missing from %s state", tt.family)
			}
			if sp.ClusterIP != netip.MustParseAddr(tt.clusterIP) || sp.NodePort != 30080 || sp.Port != 80 || sp.Protocol != proxy.TCP {
				t.Errorf("frontend = %s:%d nodePort %d, want %s:80 nodePort 30080", sp.ClusterIP, sp.Port, sp.NodePort, tt.clusterIP)
			}
			if !slices.Equal(sp.ExternalIPs, tt.external) || !slices.Equal(sp.LoadBalancerIPs, tt.lb) ||
				!slices.Equal(sp.AllowedSources, tt.ranges) {
				t.Errorf("external %v lb %v ranges %v, want %v %v %v", sp.ExternalIPs, sp.LoadBalancerIPs, sp.AllowedSources,
					tt.external, tt.lb, tt.ranges)
			}
			if _, ok := st.Services.Get(v6only.Name); ok != tt.wantV6OnlyPresent {
				t.Errorf("v6-only service present = %v, want %v", ok, tt.wantV6OnlyPresent)
			}
			if len(st.NodeIPs) != 1 || !tt.family.Contains(st.NodeIPs[0]) {
				t.Errorf("NodeIPs = %v, want this family's one node IP", st.NodeIPs)
			}
		})
	}
}
