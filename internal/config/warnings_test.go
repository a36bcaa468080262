package config

import (
	"net/netip"
	"strings"
	"testing"

	"github.com/svcproxy/svcproxy/pkg/proxy"
)

func TestCheckBadConfig(t *testing.T) {
	v4 := NodeFacts{IPv4: netip.MustParseAddr("10.0.0.1")}
	v6 := NodeFacts{PrimaryIPv6: true, IPv6: netip.MustParseAddr("fd00::1")}
	dual := NodeFacts{IPv4: netip.MustParseAddr("10.0.0.1"), IPv6: netip.MustParseAddr("fd00::1"), DualStack: true}
	for _, tc := range []struct {
		name string
		body string
		node NodeFacts
		want string // "" means no warning
	}{
		{"unset", "", v4, "nodePortAddresses is unset"},
		{"nftables defaults to primary", "mode: nftables\n", v4, ""},
		{"primary on a dual-stack node", "nodePortAddresses: [primary]\n", dual, ""},
		{"only IPv4 CIDRs with dual-stack clusterCIDR", "nodePortAddresses: [10.0.0.0/8]\nclusterCIDR: 10.1.0.0/16,fd00:1::/64\n", v4,
			"cluster appears to be dual-stack but nodePortAddresses contains only IPv4 addresses"},
		{"primary expands to one family on a dual-stack config", "nodePortAddresses: [primary]\nclusterCIDR: 10.1.0.0/16,fd00:1::/64\n", v4,
			"cluster appears to be dual-stack"},
		{"other family only", "nodePortAddresses: [10.0.0.0/8]\n", v6,
			"cluster appears to be IPv6-primary but nodePortAddresses contains only IPv4 addresses"},
		{"all covers both", "nodePortAddresses: [all]\nclusterCIDR: 10.1.0.0/16,fd00:1::/64\n", v4, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := CheckBadConfig(mustComplete(t, tc.body), tc.node)
			switch {
			case tc.want == "" && err != nil:
				t.Errorf("unexpected warning %v", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Errorf("warning %v, want %q", err, tc.want)
			}
		})
	}
}

func TestCheckBadIPConfig(t *testing.T) {
	v4 := NodeFacts{IPv4: netip.MustParseAddr("10.0.0.1")}
	for _, tc := range []struct {
		name      string
		body      string
		node      NodeFacts
		want      string
		wantFatal bool
	}{
		{"matching family", "clusterCIDR: 10.1.0.0/16\n", v4, "", false},
		{"IPv6 clusterCIDR on an IPv4-only host is fatal in ClusterCIDR mode", "clusterCIDR: fd00::/64\n", v4,
			"cluster is IPv4-only but clusterCIDRs contains only IPv6 addresses", true},
		{"not fatal when dual-stack", "clusterCIDR: fd00::/64\n", NodeFacts{IPv4: v4.IPv4, DualStack: true},
			"cluster is IPv4-primary but clusterCIDRs contains only IPv6 addresses", false},
		{"not fatal in another mode", "clusterCIDR: fd00::/64\ndetectLocalMode: NodeCIDR\n", v4, "clusterCIDRs", false},
		{"podCIDRs fatal in NodeCIDR mode", "detectLocalMode: NodeCIDR\n",
			NodeFacts{PodCIDRs: []netip.Prefix{netip.MustParsePrefix("fd00::/64")}}, "node.spec.podCIDRs contains only IPv6", true},
		{"bind addresses", "healthzBindAddress: \"[fd00::1]:10256\"\nmetricsBindAddress: \"[::]:10249\"\n", v4,
			"cluster is IPv4-only but healthzBindAddress is IPv6", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err, fatal := CheckBadIPConfig(mustComplete(t, tc.body), tc.node)
			switch {
			case tc.want == "" && err != nil:
				t.Errorf("unexpected warning %v", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Errorf("warning %v, want %q", err, tc.want)
			}
			if fatal != tc.wantFatal {
				t.Errorf("fatal = %v, want %v", fatal, tc.wantFatal)
			}
		})
	}
}

func TestModeDefaulted(t *testing.T) {
	if cfg := mustComplete(t, ""); !cfg.ModeDefaulted || cfg.Mode != proxy.ModeIPTables {
		t.Errorf("no mode: ModeDefaulted %v mode %s, want true iptables", cfg.ModeDefaulted, cfg.Mode)
	}
	if cfg := mustComplete(t, "mode: iptables\n"); cfg.ModeDefaulted {
		t.Error("explicit iptables counted as defaulted")
	}
}
