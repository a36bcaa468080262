package app

import (
	"testing"

	"github.com/svcproxy/svcproxy/internal/config"
	"github.com/svcproxy/svcproxy/pkg/proxy"
	"github.com/svcproxy/svcproxy/pkg/proxy/desired"
)

// TestLocalhostNodePortsMode: the configuration reaches desired's
// decision through computeOptions as upstream's proxiers decide. nftables:
// nothing with the gate off; with it on, the userspace proxy serves TCP for
// a family whose nodePortAddresses name loopback itself, and everything
// else is rejected. iptables: IPv4 DNAT with localhostNodePorts when
// nodePortAddresses covers 127.0.0.1. IPVS: never.
func TestLocalhostNodePortsMode(t *testing.T) {
	const (
		off     = desired.LocalhostOff
		dnat    = desired.LocalhostDNAT
		reject  = desired.LocalhostReject
		proxied = desired.LocalhostProxied
	)
	for _, tc := range []struct {
		mode  config.Mode
		gate  bool
		addrs []string
		// iptables rows: gate stands for localhostNodePorts.
		v4, v6 desired.LocalhostNodePorts
	}{
		{config.ModeNFTables, false, []string{"localhost"}, off, off},
		{config.ModeIPTables, false, []string{"localhost"}, off, off},
		{config.ModeIPTables, true, []string{"localhost"}, dnat, off},
		{config.ModeIPTables, true, []string{"10.0.0.0/8"}, off, off},
		{config.ModeIPVS, true, nil, off, off},
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
		cfg := &config.Config{Mode: tc.mode, FeatureGate: gate, NodePortAddresses: tc.addrs,
			LocalhostNodePorts: tc.mode == config.ModeIPTables && tc.gate}
		if got := desired.DecideLocalhost(computeOptions(cfg, proxy.IPv4)); got != tc.v4 {
			t.Errorf("%s gate=%v %v: IPv4 %s, want %s", tc.mode, tc.gate, tc.addrs, got, tc.v4)
		}
		if got := desired.DecideLocalhost(computeOptions(cfg, proxy.IPv6)); got != tc.v6 {
			t.Errorf("%s gate=%v %v: IPv6 %s, want %s", tc.mode, tc.gate, tc.addrs, got, tc.v6)
		}
	}
}
