package config

import (
	"net/netip"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/svcproxy/svcproxy/pkg/proxy"
)

// expectedDefaults is the Config of a file that sets only mode, written
// field by field from contract §2.1/§2.2 (not derived from the code).
func expectedDefaults(mode proxy.Mode) *Config {
	cfg := &Config{
		Mode:               mode,
		BindAddress:        netip.MustParseAddr("0.0.0.0"),
		HealthzBindAddress: "0.0.0.0:10256",
		MetricsBindAddress: "127.0.0.1:10249",
		SyncPeriod:         30 * time.Second,
		MinSyncPeriod:      time.Second,
		ConfigSyncPeriod:   15 * time.Minute,
		MasqueradeBit:      14,
		LocalhostNodePorts: true,
		DetectLocalMode:    LocalModeClusterCIDR,
		OOMScoreAdj:        -999,
		Conntrack: Conntrack{
			MaxPerCore:            32768,
			Min:                   131072,
			TCPEstablishedTimeout: 24 * time.Hour,
			TCPCloseWaitTimeout:   time.Hour,
		},
		ClientConnection: ClientConnection{
			ContentType: "application/vnd.kubernetes.protobuf",
			QPS:         5,
			Burst:       10,
		},
		FeatureGates: map[string]bool{},
	}
	switch mode {
	case proxy.ModeIPVS:
		cfg.MinSyncPeriod = 0 // ipvs.minSyncPeriod defaults to 0s
	case proxy.ModeNFTables:
		cfg.NodePortAddresses = []string{"primary"}
	}
	return cfg
}

func TestDefaultsPerMode(t *testing.T) {
	for _, tc := range []struct {
		name string
		body string
		want proxy.Mode
	}{
		{name: "unset mode is iptables", body: "", want: proxy.ModeIPTables},
		{name: "iptables", body: "mode: iptables\n", want: proxy.ModeIPTables},
		{name: "ipvs", body: "mode: ipvs\n", want: proxy.ModeIPVS},
		{name: "nftables", body: "mode: nftables\n", want: proxy.ModeNFTables},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := mustComplete(t, tc.body)
			if got.Versioned == nil {
				t.Fatal("Versioned is nil")
			}
			if string(got.Versioned.Mode) != string(tc.want) {
				t.Errorf("Versioned.Mode = %q, want %q", got.Versioned.Mode, tc.want)
			}
			opts := cmpopts.IgnoreFields(Config{}, "Versioned", "FeatureGate", "ModeDefaulted")
			if diff := cmp.Diff(expectedDefaults(tc.want), got, opts, cmpopts.EquateComparable(netip.Addr{})); diff != "" {
				t.Errorf("Config mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

func TestDefaultsVersionedSections(t *testing.T) {
	obj := mustDefaulted(t, "")
	checks := []struct {
		field     string
		got, want any
	}{
		{"iptables.syncPeriod", obj.IPTables.SyncPeriod.Duration, 30 * time.Second},
		{"iptables.minSyncPeriod", obj.IPTables.MinSyncPeriod.Duration, time.Second},
		{"iptables.masqueradeBit", *obj.IPTables.MasqueradeBit, int32(14)},
		{"iptables.localhostNodePorts", *obj.IPTables.LocalhostNodePorts, true},
		{"ipvs.syncPeriod", obj.IPVS.SyncPeriod.Duration, 30 * time.Second},
		{"ipvs.minSyncPeriod", obj.IPVS.MinSyncPeriod.Duration, time.Duration(0)},
		{"ipvs.scheduler", obj.IPVS.Scheduler, ""},
		{"nftables.syncPeriod", obj.NFTables.SyncPeriod.Duration, 30 * time.Second},
		{"nftables.minSyncPeriod", obj.NFTables.MinSyncPeriod.Duration, time.Second},
		{"nftables.masqueradeBit", *obj.NFTables.MasqueradeBit, int32(14)},
		{"logging.format", obj.Logging.Format, "text"},
		{"logging.flushFrequency", obj.Logging.FlushFrequency.Duration.Duration, 5 * time.Second},
		{"mode before platform defaults", string(obj.Mode), ""},
		{"nodePortAddresses before platform defaults", len(obj.NodePortAddresses), 0},
	}
	for _, c := range checks {
		if c.got != c.want {
			t.Errorf("%s = %v, want %v", c.field, c.got, c.want)
		}
	}
}

func TestDefaultAddresses(t *testing.T) {
	for _, tc := range []struct {
		body                  string
		wantHealthz, wantMetr string
	}{
		{"bindAddress: \"::\"\n", "[::]:10256", "[::1]:10249"},
		{"bindAddress: 10.0.0.1\n", "0.0.0.0:10256", "127.0.0.1:10249"},
		{"healthzBindAddress: 10.1.1.1\nmetricsBindAddress: 0.0.0.0\n", "10.1.1.1:10256", "0.0.0.0:10249"},
		{"healthzBindAddress: \"fd00::1\"\nmetricsBindAddress: \"::\"\n", "[fd00::1]:10256", "[::]:10249"},
		{"healthzBindAddress: 10.1.1.1:9999\n", "10.1.1.1:9999", "127.0.0.1:10249"},
	} {
		obj := mustDefaulted(t, tc.body)
		if obj.HealthzBindAddress != tc.wantHealthz || obj.MetricsBindAddress != tc.wantMetr {
			t.Errorf("%q: healthz %q metrics %q, want %q %q", tc.body,
				obj.HealthzBindAddress, obj.MetricsBindAddress, tc.wantHealthz, tc.wantMetr)
		}
	}
}

func TestPerModeMapping(t *testing.T) {
	body := `iptables: {syncPeriod: 11s, minSyncPeriod: 2s, masqueradeAll: true, masqueradeBit: 10}
ipvs: {syncPeriod: 12s, minSyncPeriod: 3s}
nftables: {syncPeriod: 13s, minSyncPeriod: 4s, masqueradeAll: false, masqueradeBit: 12}
clusterCIDR: "10.244.0.0/16,fd00:10:244::/56"
`
	for _, tc := range []struct {
		mode          string
		sync, minSync time.Duration
		masqAll       bool
		masqBit       int
	}{
		{"iptables", 11 * time.Second, 2 * time.Second, true, 10},
		{"ipvs", 12 * time.Second, 3 * time.Second, true, 10},
		{"nftables", 13 * time.Second, 4 * time.Second, false, 12},
	} {
		cfg := mustComplete(t, "mode: "+tc.mode+"\n"+body)
		if cfg.SyncPeriod != tc.sync || cfg.MinSyncPeriod != tc.minSync ||
			cfg.MasqueradeAll != tc.masqAll || cfg.MasqueradeBit != tc.masqBit {
			t.Errorf("%s: got sync %s min %s masqAll %v bit %d, want %s %s %v %d", tc.mode,
				cfg.SyncPeriod, cfg.MinSyncPeriod, cfg.MasqueradeAll, cfg.MasqueradeBit,
				tc.sync, tc.minSync, tc.masqAll, tc.masqBit)
		}
		want := []netip.Prefix{netip.MustParsePrefix("10.244.0.0/16"), netip.MustParsePrefix("fd00:10:244::/56")}
		if !cmp.Equal(cfg.ClusterCIDRs, want, cmpopts.EquateComparable(netip.Prefix{})) {
			t.Errorf("%s: ClusterCIDRs = %v, want %v", tc.mode, cfg.ClusterCIDRs, want)
		}
	}
}

func TestExplicitNodePortAddressesKeptInNFTables(t *testing.T) {
	cfg := mustComplete(t, "mode: nftables\nnodePortAddresses: [\"10.0.0.0/8\"]\n")
	if !cmp.Equal(cfg.NodePortAddresses, []string{"10.0.0.0/8"}) {
		t.Errorf("NodePortAddresses = %v", cfg.NodePortAddresses)
	}
}
