package config

import (
	"strings"
	"testing"
)

func TestValidate(t *testing.T) {
	for _, tc := range []struct {
		name    string
		body    string
		wantErr []string // each must appear; none means valid
	}{
		{name: "defaults are valid", body: ""},
		{name: "full valid", body: "mode: ipvs\nipvs: {scheduler: wrr, excludeCIDRs: [10.0.0.0/8], minSyncPeriod: 5s}\nclusterCIDR: 10.0.0.0/8,fd00::/48\nnodePortAddresses: [primary, 192.168.0.0/16]\n"},
		{name: "min above sync", body: "iptables: {syncPeriod: 5s, minSyncPeriod: 10s}\n",
			wantErr: []string{"iptables.minSyncPeriod: must be <= syncPeriod"}},
		{name: "only the mode's section is checked", body: "mode: nftables\niptables: {syncPeriod: 5s, minSyncPeriod: 10s}\n"},
		{name: "nftables min above sync", body: "mode: nftables\nnftables: {syncPeriod: 5s, minSyncPeriod: 10s}\n",
			wantErr: []string{"nftables.minSyncPeriod: must be <= syncPeriod"}},
		{name: "negative sync", body: "mode: ipvs\nipvs: {syncPeriod: -1s}\n",
			wantErr: []string{"ipvs.syncPeriod: must be greater than 0"}},
		{name: "negative min", body: "iptables: {minSyncPeriod: -1s}\n",
			wantErr: []string{"iptables.minSyncPeriod: must be greater than or equal to 0"}},
		{name: "masquerade bit", body: "iptables: {masqueradeBit: 32}\nnftables: {masqueradeBit: -1}\n",
			wantErr: []string{"iptables.masqueradeBit", "nftables.masqueradeBit"}},
		{name: "mode", body: "mode: userspace\n", wantErr: []string{"mode: unsupported value \"userspace\""}},
		{name: "bind address", body: "bindAddress: nope\n", wantErr: []string{"bindAddress: must be an IP"}},
		{name: "healthz port", body: "healthzBindAddress: 0.0.0.0:0\n", wantErr: []string{"healthzBindAddress: port"}},
		{name: "metrics host", body: "metricsBindAddress: localhost:10249\n", wantErr: []string{"metricsBindAddress: must be IP:port"}},
		{name: "oom", body: "oomScoreAdj: 1001\n", wantErr: []string{"oomScoreAdj"}},
		{name: "conntrack", body: "conntrack: {maxPerCore: -1, min: -1, tcpEstablishedTimeout: -1s, udpTimeout: -1s}\n",
			wantErr: []string{"conntrack.maxPerCore", "conntrack.min", "conntrack.tcpEstablishedTimeout", "conntrack.udpTimeout"}},
		{name: "ipvs", body: "ipvs: {scheduler: fancy, excludeCIDRs: [10.0.0.0], tcpTimeout: -1s}\n",
			wantErr: []string{"ipvs.scheduler", "ipvs.excludeCIDRs[0]", "ipvs.tcpTimeout"}},
		{name: "detect local mode", body: "detectLocalMode: Magic\n", wantErr: []string{"detectLocalMode: unsupported"}},
		{name: "bridge needs name", body: "detectLocalMode: BridgeInterface\n", wantErr: []string{"detectLocal.bridgeInterface"}},
		{name: "prefix needs name", body: "detectLocalMode: InterfaceNamePrefix\n", wantErr: []string{"detectLocal.interfaceNamePrefix"}},
		{name: "cluster cidr same family", body: "clusterCIDR: 10.0.0.0/8,11.0.0.0/8\n", wantErr: []string{"clusterCIDR: two CIDRs"}},
		{name: "cluster cidr three", body: "clusterCIDR: 10.0.0.0/8,fd00::/48,11.0.0.0/8\n", wantErr: []string{"clusterCIDR: only one"}},
		{name: "cluster cidr bad", body: "clusterCIDR: 10.0.0.0/33\n", wantErr: []string{"clusterCIDR"}},
		{name: "node port addresses", body: "nodePortAddresses: [primary, primary, bogus]\n",
			wantErr: []string{"nodePortAddresses[1]: duplicate", "nodePortAddresses[2]"}},
		{name: "config sync period", body: "configSyncPeriod: -1s\n", wantErr: []string{"configSyncPeriod: must be greater than 0"}},
		{name: "burst", body: "clientConnection: {burst: -1}\n", wantErr: []string{"clientConnection.burst"}},
		{name: "port range", body: "portRange: abc\n", wantErr: []string{"portRange"}},
		{name: "hidden metrics version", body: "showHiddenMetricsForVersion: latest\n", wantErr: []string{"showHiddenMetricsForVersion"}},
		{name: "logging format", body: "logging: {format: xml}\n", wantErr: []string{"logging.format"}},
		{name: "unknown feature gate only warns", body: "featureGates: {SomeKubeletGate: true}\n"},
		{name: "all errors joined", body: "mode: bogus\noomScoreAdj: -2000\n", wantErr: []string{"mode:", "oomScoreAdj:"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			obj := mustDefaulted(t, tc.body)
			ApplyPlatformDefaults(obj)
			err := Validate(obj)
			if len(tc.wantErr) == 0 {
				if err != nil {
					t.Fatalf("unexpected error: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("no error, want %q", tc.wantErr)
			}
			for _, want := range tc.wantErr {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q does not contain %q", err, want)
				}
			}
		})
	}
}

func TestWarnings(t *testing.T) {
	obj := mustDefaulted(t, "featureGates: {SomeKubeletGate: true, LoggingBetaOptions: true}\n")
	ApplyPlatformDefaults(obj)
	w := strings.Join(Warnings(obj), "\n")
	if !strings.Contains(w, "--nodeport-addresses primary") || !strings.Contains(w, "SomeKubeletGate") {
		t.Errorf("warnings = %q", w)
	}
	if strings.Contains(w, "LoggingBetaOptions") {
		t.Errorf("known gate reported as unknown: %q", w)
	}
	obj = mustDefaulted(t, "mode: nftables\n")
	ApplyPlatformDefaults(obj)
	if w := Warnings(obj); len(w) != 0 {
		t.Errorf("nftables defaults warn: %q", w)
	}
}
