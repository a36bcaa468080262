package backends

import (
	"testing"

	"github.com/svcproxy/svcproxy/internal/config"
	"github.com/svcproxy/svcproxy/pkg/pipeline/backends/ipvs"
	"github.com/svcproxy/svcproxy/pkg/pipeline/desired"
	"github.com/svcproxy/svcproxy/pkg/proxy"
)

func mustLookup(t *testing.T, mode proxy.Mode) *Backend {
	t.Helper()
	b, err := Table.Lookup(mode)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestLocalhostNodePortsMode: the configuration reaches desired's
// decision through each row's Options as upstream's proxiers decide. nftables:
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
		mode  proxy.Mode
		gate  bool
		addrs []string
		// iptables rows: gate stands for localhostNodePorts.
		v4, v6 desired.LocalhostNodePorts
	}{
		{proxy.ModeNFTables, false, []string{"localhost"}, off, off},
		{proxy.ModeIPTables, false, []string{"localhost"}, off, off},
		{proxy.ModeIPTables, true, []string{"localhost"}, dnat, off},
		{proxy.ModeIPTables, true, []string{"10.0.0.0/8"}, off, off},
		{proxy.ModeIPVS, true, nil, off, off},
		{proxy.ModeNFTables, true, nil, reject, reject},
		{proxy.ModeNFTables, true, []string{"primary"}, reject, reject},
		{proxy.ModeNFTables, true, []string{"all"}, reject, reject},
		{proxy.ModeNFTables, true, []string{"0.0.0.0/0", "::/0"}, reject, reject},
		{proxy.ModeNFTables, true, []string{"localhost"}, proxied, proxied},
		{proxy.ModeNFTables, true, []string{"primary", "127.0.0.0/8"}, proxied, reject},
		{proxy.ModeNFTables, true, []string{"127.0.0.1/32"}, proxied, reject},
		{proxy.ModeNFTables, true, []string{"::1/128"}, reject, proxied},
		// A range that merely holds loopback is not explicit (upstream
		// looks at the range's own address).
		{proxy.ModeNFTables, true, []string{"126.0.0.0/7"}, reject, reject},
	} {
		gate, err := config.NewFeatureGate(map[string]bool{string(config.KubeProxyNFTablesLocalhostNodePorts): tc.gate})
		if err != nil {
			t.Fatal(err)
		}
		cfg := &config.Config{Mode: tc.mode, FeatureGate: gate, NodePortAddresses: tc.addrs,
			LocalhostNodePorts: tc.mode == proxy.ModeIPTables && tc.gate}
		if got := desired.DecideLocalhost(mustLookup(t, tc.mode).Options(cfg, proxy.IPv4)); got != tc.v4 {
			t.Errorf("%s gate=%v %v: IPv4 %s, want %s", tc.mode, tc.gate, tc.addrs, got, tc.v4)
		}
		if got := desired.DecideLocalhost(mustLookup(t, tc.mode).Options(cfg, proxy.IPv6)); got != tc.v6 {
			t.Errorf("%s gate=%v %v: IPv6 %s, want %s", tc.mode, tc.gate, tc.addrs, got, tc.v6)
		}
	}
}

// TestOptionsIPVS: in IPVS mode the row hands desired what it needs
// to decide node-port addresses and, through IPVS's own PortSettings,
// schedulers once (nothing is left for the backend to resolve); other
// modes ask for neither.
func TestOptionsIPVS(t *testing.T) {
	for _, tc := range []struct {
		mode      proxy.Mode
		scheduler string
		want      string // default scheduler; "" means no Scheduling
	}{
		{proxy.ModeIPVS, "", "rr"},
		{proxy.ModeIPVS, "wlc", "wlc"},
		{proxy.ModeNFTables, "wlc", ""},
		{proxy.ModeIPTables, "", ""},
	} {
		cfg := &config.Config{Mode: tc.mode}
		cfg.IPVS.Scheduler = tc.scheduler
		o := mustLookup(t, tc.mode).Options(cfg, proxy.IPv4)
		if o.BindNodePorts != (tc.mode == proxy.ModeIPVS) {
			t.Errorf("%s: BindNodePorts = %t", tc.mode, o.BindNodePorts)
		}
		if tc.want == "" {
			if o.PortSettings != nil {
				t.Errorf("%s: PortSettings = %+v, want none", tc.mode, o.PortSettings)
			}
			continue
		}
		if o.PortSettings == nil {
			t.Fatalf("%s %q: no PortSettings", tc.mode, tc.scheduler)
		}
		if got := o.PortSettings.PortSetting(nil); got == nil || got.Value != tc.want {
			t.Errorf("%s %q: a port without annotation gets %+v, want %q", tc.mode, tc.scheduler, got, tc.want)
		}
		if got := o.PortSettings.PortSetting(map[string]string{ipvs.SchedulerAnnotation: "fastest"}); got == nil || got.Refused != "fastest" {
			t.Errorf("%s %q: a port asking for no kernel scheduler gets %+v, want it refused", tc.mode, tc.scheduler, got)
		}
	}
}

// TestOptionsExternalBalancing: the node's default reaches desired in
// every mode; the decision is neutral, whichever backend renders it.
func TestOptionsExternalBalancing(t *testing.T) {
	for _, b := range Table {
		cfg := &config.Config{Mode: b.Mode, ExternalBalancing: proxy.BalanceMaglev}
		if o := b.Options(cfg, proxy.IPv4); o.ExternalBalancing != proxy.BalanceMaglev {
			t.Errorf("%s: ExternalBalancing = %q, want maglev", b.Mode, o.ExternalBalancing)
		}
	}
}

// TestOptionsExternalForwarding: the node's default reaches desired in
// every mode; only ebpf mode with --bpf-dsr (and its tc programs) lets
// desired give ports a DSR, so every other mode's States are as without.
func TestOptionsExternalForwarding(t *testing.T) {
	for _, b := range Table {
		for _, dsr := range []bool{false, true} {
			cfg := &config.Config{Mode: b.Mode, ExternalForwarding: proxy.ForwardDSR, BPFDSR: dsr, BPFTCInterfaces: []string{"eth0"}}
			o := b.Options(cfg, proxy.IPv4)
			if o.ExternalForwarding != proxy.ForwardDSR {
				t.Errorf("%s: ExternalForwarding = %q, want dsr", b.Mode, o.ExternalForwarding)
			}
			if want := dsr && b.Mode == proxy.ModeEBPF; o.DSR != want {
				t.Errorf("%s --bpf-dsr=%t: Options.DSR = %t, want %t", b.Mode, dsr, o.DSR, want)
			}
		}
	}
	cfg := &config.Config{Mode: proxy.ModeEBPF, BPFDSR: true}
	if mustLookup(t, proxy.ModeEBPF).Options(cfg, proxy.IPv4).DSR {
		t.Error("ebpf mode without tc programs: Options.DSR set; nothing there tunnels")
	}
}
