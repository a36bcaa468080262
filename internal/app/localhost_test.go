package app

import (
	"testing"

	"github.com/svcproxy/svcproxy/internal/config"
	"github.com/svcproxy/svcproxy/pkg/proxy"
	"github.com/svcproxy/svcproxy/pkg/proxy/nftables"
)

// TestLocalhostNodePortsMode follows upstream's nftables proxier: nothing
// with the gate off; with it on, the userspace proxy serves TCP for a
// family whose nodePortAddresses name loopback itself, and everything
// else is rejected.
func TestLocalhostNodePortsMode(t *testing.T) {
	const (
		off     = nftables.LocalhostNodePortsOff
		reject  = nftables.LocalhostNodePortsReject
		proxied = nftables.LocalhostNodePortsProxied
	)
	for _, tc := range []struct {
		mode   config.Mode
		gate   bool
		addrs  []string
		v4, v6 nftables.LocalhostNodePorts
	}{
		{config.ModeNFTables, false, []string{"localhost"}, off, off},
		{config.ModeIPTables, true, []string{"localhost"}, off, off},
		{config.ModeNFTables, true, nil, reject, reject},
		{config.ModeNFTables, true, []string{"primary"}, reject, reject},
		{config.ModeNFTables, true, []string{"all"}, reject, reject},
		{config.ModeNFTables, true, []string{"0.0.0.0/0", "::/0"}, reject, reject},
		{config.ModeNFTables, true, []string{"localhost"}, proxied, proxied},
		{config.ModeNFTables, true, []string{"primary", "127.0.0.0/8"}, proxied, reject},
		{config.ModeNFTables, true, []string{"127.0.0.1/32"}, proxied, reject},
		{config.ModeNFTables, true, []string{"::1/128"}, reject, proxied},
		// A range that merely holds loopback is not explicit (upstream
		// looks at the range's own address).
		{config.ModeNFTables, true, []string{"126.0.0.0/7"}, reject, reject},
	} {
		gate, err := config.NewFeatureGate(map[string]bool{string(config.KubeProxyNFTablesLocalhostNodePorts): tc.gate})
		if err != nil {
			t.Fatal(err)
		}
		cfg := &config.Config{Mode: tc.mode, FeatureGate: gate, NodePortAddresses: tc.addrs}
		if got := localhostNodePorts(cfg, proxy.IPv4); got != tc.v4 {
			t.Errorf("%s gate=%v %v: IPv4 %d, want %d", tc.mode, tc.gate, tc.addrs, got, tc.v4)
		}
		if got := localhostNodePorts(cfg, proxy.IPv6); got != tc.v6 {
			t.Errorf("%s gate=%v %v: IPv6 %d, want %d", tc.mode, tc.gate, tc.addrs, got, tc.v6)
		}
	}
}
