package desired

import (
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/svcproxy/svcproxy/pkg/pipeline/model"
	"github.com/svcproxy/svcproxy/pkg/proxy"
)

// TestDecideLocalhost: the localhost node-port decision per mode, family
// and nodePortAddresses, as upstream's iptables and nftables proxiers make
// it.
func TestDecideLocalhost(t *testing.T) {
	tests := []struct {
		name    string
		mode    LocalhostMode
		family  proxy.IPFamily
		entries []string
		want    LocalhostNodePorts
	}{
		{"none", LocalhostModeNone, proxy.IPv4, []string{"localhost"}, LocalhostOff},
		{"iptables unset", LocalhostModeDNAT, proxy.IPv4, nil, LocalhostDNAT},
		{"iptables all", LocalhostModeDNAT, proxy.IPv4, []string{"all"}, LocalhostDNAT},
		{"iptables localhost", LocalhostModeDNAT, proxy.IPv4, []string{"localhost"}, LocalhostDNAT},
		{"iptables cidr with loopback", LocalhostModeDNAT, proxy.IPv4, []string{"10.0.0.0/8", "0.0.0.0/1"}, LocalhostDNAT},
		{"iptables cidr without loopback", LocalhostModeDNAT, proxy.IPv4, []string{"10.0.0.0/8"}, LocalhostOff},
		{"iptables primary", LocalhostModeDNAT, proxy.IPv4, []string{"primary"}, LocalhostOff},
		// No IPv4 entry: every IPv4 address answers, 127.0.0.1 included,
		// as upstream's NewNodePortAddresses (matchAll) decides.
		{"iptables IPv6 entries only", LocalhostModeDNAT, proxy.IPv4, []string{"fd00::/64"}, LocalhostDNAT},
		{"iptables never IPv6", LocalhostModeDNAT, proxy.IPv6, nil, LocalhostOff},
		{"nftables explicit", LocalhostModeProxied, proxy.IPv4, []string{"127.0.0.0/8"}, LocalhostProxied},
		{"nftables keyword v6", LocalhostModeProxied, proxy.IPv6, []string{"localhost"}, LocalhostProxied},
		{"nftables other family's loopback", LocalhostModeProxied, proxy.IPv6, []string{"127.0.0.1/32"}, LocalhostReject},
		{"nftables all is not explicit", LocalhostModeProxied, proxy.IPv4, []string{"0.0.0.0/0"}, LocalhostReject},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := DecideLocalhost(Options{Family: tt.family, Localhost: tt.mode, NodePortAddresses: tt.entries})
			if got != tt.want {
				t.Errorf("DecideLocalhost(%v, %s, %q) = %s, want %s", tt.mode, tt.family, tt.entries, got, tt.want)
			}
		})
	}
}

// TestLocalhostRejects: which protocols each decision rejects and counts.
func TestLocalhostRejects(t *testing.T) {
	all := []proxy.Protocol{proxy.TCP, proxy.UDP, proxy.SCTP}
	for _, l := range []LocalhostNodePorts{LocalhostOff, LocalhostDNAT, LocalhostReject, LocalhostProxied} {
		for _, p := range all {
			if got, want := l.Rejects(p), slices.Contains(l.Rejected(), p); got != want {
				t.Errorf("%s.Rejects(%s) = %t, Rejected() says %t", l, p, got, want)
			}
		}
	}
	if got := LocalhostProxied.Rejected(); !slices.Equal(got, []proxy.Protocol{proxy.UDP, proxy.SCTP}) {
		t.Errorf("proxied rejects %v, want UDP and SCTP (TCP is served)", got)
	}
	if got := LocalhostReject.Rejected(); !slices.Equal(got, all) {
		t.Errorf("reject rejects %v, want every protocol", got)
	}
}

// TestComputeLocalhost: Compute carries the decision in State.NodePorts and
// keeps loopback out of the node-port addresses unless it DNATs them, so
// that no backend has to filter loopback itself.
func TestComputeLocalhost(t *testing.T) {
	lo4 := loopback(proxy.IPv4)
	tests := []struct {
		name      string
		opts      Options
		wantIPs   []netip.Addr
		wantAll   bool
		localhost LocalhostNodePorts
	}{
		{"nftables gate off", Options{Family: proxy.IPv4, NodePortAddresses: []string{"localhost", "192.168.0.2/32"}},
			addrs("192.168.0.2"), false, LocalhostOff},
		{"nftables gate on", Options{Family: proxy.IPv4, Localhost: LocalhostModeProxied, NodePortAddresses: []string{"localhost"}},
			nil, false, LocalhostProxied},
		{"iptables localhost", Options{Family: proxy.IPv4, Localhost: LocalhostModeDNAT, NodePortAddresses: []string{"localhost"}},
			[]netip.Addr{lo4}, false, LocalhostDNAT},
		{"iptables all", Options{Family: proxy.IPv4, Localhost: LocalhostModeDNAT}, nil, true, LocalhostDNAT},
		{"iptables v6 localhost", Options{Family: proxy.IPv6, Localhost: LocalhostModeDNAT, NodePortAddresses: []string{"localhost"}},
			nil, false, LocalhostOff},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st := Compute(nil, nil, model.Changes{}, testNode, tt.opts)
			np := st.NodePorts
			if np.All != tt.wantAll || !slices.Equal(np.IPs, tt.wantIPs) || np.Localhost != tt.localhost {
				t.Errorf("NodePorts = %+v, want All=%t IPs=%v Localhost=%s", np, tt.wantAll, tt.wantIPs, tt.localhost)
			}
			if np.Localhost == LocalhostDNAT && np.All && !st.AcceptsNodePorts(lo4, true) {
				t.Errorf("a DNATed 127.0.0.1 must accept node ports with All")
			}
			if np.Localhost != LocalhostDNAT && st.AcceptsNodePorts(lo4, true) {
				t.Errorf("127.0.0.1 accepts node ports under %s", np.Localhost)
			}
		})
	}
}

// TestCoversIPv4Loopback: as upstream's NodePortAddresses.ContainsIPv4Loopback.
func TestCoversIPv4Loopback(t *testing.T) {
	for entries, want := range map[string]bool{
		"":                        true,
		"fd00::/64":               true, // no IPv4 entry: every address
		"127.0.0.0/8":             true,
		"0.0.0.0/0":               true,
		"localhost":               true,
		"primary":                 false,
		"10.0.0.0/8":              false,
		"10.0.0.0/8,127.0.0.1/32": true,
	} {
		var list []string
		if entries != "" {
			list = strings.Split(entries, ",")
		}
		if got := coversIPv4Loopback(list); got != want {
			t.Errorf("coversIPv4Loopback(%q) = %v, want %v", entries, got, want)
		}
	}
}

// TestBoundNodePorts: with BindNodePorts, Compute resolves every address
// node ports answer on from the host's addresses, so that IPVS needs no
// host addresses of its own; without it, Bound stays empty.
func TestBoundNodePorts(t *testing.T) {
	node := testNode
	node.HostAddrs = append(addrs("169.254.3.3", "fe80::1"), testNode.HostAddrs...)
	for _, tc := range []struct {
		name  string
		opts  Options
		bound []netip.Addr
	}{
		{"not asked", Options{Family: proxy.IPv4}, nil},
		{"all, IPv4: no loopback, no link-local", Options{Family: proxy.IPv4, BindNodePorts: true}, addrs("192.168.0.2", "192.168.1.2")},
		{"all, IPv6", Options{Family: proxy.IPv6, BindNodePorts: true}, addrs("fd00:1::2", "fd00:2::2")},
		{"a CIDR", Options{Family: proxy.IPv4, BindNodePorts: true, NodePortAddresses: []string{"192.168.1.0/24", "localhost"}},
			addrs("192.168.1.2")},
		{"loopback when DNATed", Options{Family: proxy.IPv4, BindNodePorts: true, Localhost: LocalhostModeDNAT},
			addrs("127.0.0.1", "192.168.0.2", "192.168.1.2")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := Compute(nil, nil, model.Changes{}, node, tc.opts)
			if !slices.Equal(st.NodePorts.Bound, tc.bound) {
				t.Errorf("Bound = %v, want %v", st.NodePorts.Bound, tc.bound)
			}
		})
	}
}
