package config

import (
	"strings"
	"testing"
)

func TestValidate(t *testing.T) {
	const root = "KubeProxyConfiguration."
	for _, tc := range []struct {
		name    string
		body    string
		wantErr []string // each must appear; none means valid
	}{
		{name: "defaults are valid", body: ""},
		{name: "full valid", body: "mode: ipvs\nipvs: {scheduler: wrr, excludeCIDRs: [10.0.0.0/8], minSyncPeriod: 5s}\nclusterCIDR: 10.0.0.0/8,fd00::/48\nnodePortAddresses: [primary, 192.168.0.0/16]\n"},
		{name: "min above sync", body: "iptables: {syncPeriod: 5s, minSyncPeriod: 10s}\n",
			wantErr: []string{root + "SyncPeriod: Invalid value", "must be greater than or equal to " + root + "MinSyncPeriod"}},
		{name: "only the mode's section is checked", body: "mode: nftables\niptables: {syncPeriod: 5s, minSyncPeriod: 10s}\n"},
		{name: "nftables min above sync", body: "mode: nftables\nnftables: {syncPeriod: 5s, minSyncPeriod: 10s}\n",
			wantErr: []string{root + "SyncPeriod"}},
		{name: "negative sync", body: "mode: ipvs\nipvs: {syncPeriod: -1s}\n",
			wantErr: []string{root + "SyncPeriod: Invalid value: \"-1s\": must be greater than 0"}},
		{name: "negative min", body: "iptables: {minSyncPeriod: -1s}\n",
			wantErr: []string{root + "MinSyncPeriod"}},
		{name: "masquerade bits: iptables always, nftables in its mode", body: "iptables: {masqueradeBit: 32}\nnftables: {masqueradeBit: -1}\n",
			wantErr: []string{root + "KubeProxyIPTablesConfiguration.MasqueradeBit"}},
		{name: "nftables masquerade bit", body: "mode: nftables\nnftables: {masqueradeBit: -1}\n",
			wantErr: []string{root + "KubeProxyNFTablesConfiguration.MasqueradeBit"}},
		{name: "mode", body: "mode: userspace\n", wantErr: []string{root + "Mode.ProxyMode: Invalid value: \"userspace\""}},
		{name: "ipvs needs its gate", body: "mode: ipvs\nfeatureGates: {KubeProxyIPVS: false}\n",
			wantErr: []string{root + "Mode.ProxyMode: Invalid value: \"ipvs\": must be iptables, nftables or blank"}},
		{name: "bind address", body: "bindAddress: nope\n", wantErr: []string{root + "BindAddress"}},
		{name: "healthz port", body: "healthzBindAddress: 0.0.0.0:0\n", wantErr: []string{root + "HealthzBindAddress: Invalid value: \"0\": must be a valid port"}},
		{name: "bracketed bare IPv6 is not IP:port", body: "healthzBindAddress: \"[::]\"\n", wantErr: []string{root + "HealthzBindAddress"}},
		{name: "metrics host", body: "metricsBindAddress: localhost:10249\n", wantErr: []string{root + "MetricsBindAddress"}},
		{name: "oom", body: "oomScoreAdj: 1001\n", wantErr: []string{root + "KubeProxyLinuxConfiguration.OOMScoreAdj"}},
		{name: "conntrack", body: "conntrack: {maxPerCore: -1, min: -1, tcpEstablishedTimeout: -1s, udpTimeout: -1s}\n",
			wantErr: []string{"KubeProxyConntrackConfiguration.MaxPerCore", "KubeProxyConntrackConfiguration.Min", "KubeProxyConntrackConfiguration.TCPEstablishedTimeout", "KubeProxyConntrackConfiguration.UDPTimeout"}},
		{name: "ipvs in ipvs mode", body: "mode: ipvs\nipvs: {excludeCIDRs: [10.0.0.0], tcpTimeout: -1s}\n",
			wantErr: []string{"KubeProxyIPVSConfiguration.ExcludeCidrs[0]", "KubeProxyIPVSConfiguration.TCPTimeout"}},
		{name: "ipvs settings of another mode are not checked", body: "ipvs: {scheduler: fancy, excludeCIDRs: [10.0.0.0], tcpTimeout: -1s}\n"},
		{name: "the scheduler is checked by the proxier, not here", body: "mode: ipvs\nipvs: {scheduler: fancy}\n"},
		{name: "detect local mode", body: "detectLocalMode: Magic\n", wantErr: []string{root + "DetectLocalMode: Unsupported value: \"Magic\""}},
		{name: "bridge needs name", body: "detectLocalMode: BridgeInterface\n", wantErr: []string{"DetectLocalConfiguration.InterfaceName"}},
		{name: "prefix needs name", body: "detectLocalMode: InterfaceNamePrefix\n", wantErr: []string{"DetectLocalConfiguration.InterfacePrefix"}},
		{name: "cluster cidr same family", body: "clusterCIDR: 10.0.0.0/8,11.0.0.0/8\n", wantErr: []string{"DetectLocalConfiguration.ClusterCIDRs"}},
		{name: "cluster cidr three", body: "clusterCIDR: 10.0.0.0/8,fd00::/48,11.0.0.0/8\n", wantErr: []string{"DetectLocalConfiguration.ClusterCIDRs"}},
		{name: "cluster cidr bad", body: "clusterCIDR: 10.0.0.0/33\n", wantErr: []string{"DetectLocalConfiguration.ClusterCIDRs[0]"}},
		{name: "cluster cidr unused in NodeCIDR mode", body: "detectLocalMode: NodeCIDR\nclusterCIDR: garbage\n"},
		{name: "node port addresses", body: "nodePortAddresses: [primary, primary, bogus]\n",
			wantErr: []string{root + "NodePortAddresses[1]: Duplicate value", root + "NodePortAddresses[2]"}},
		{name: "config sync period", body: "configSyncPeriod: -1s\n", wantErr: []string{root + "ConfigSyncPeriod"}},
		{name: "burst", body: "clientConnection: {burst: -1}\n", wantErr: []string{root + "ClientConnection.Burst"}},
		{name: "port range is gone upstream", body: "portRange: abc\n"},
		{name: "hidden metrics: only the previous minor", body: "showHiddenMetricsForVersion: \"1.35\"\n", wantErr: []string{root + "ShowHiddenMetricsForVersion"}},
		{name: "hidden metrics: previous minor", body: "showHiddenMetricsForVersion: \"1.36\"\n"},
		{name: "logging format", body: "logging: {format: xml}\n", wantErr: []string{root + "logging.format"}},
		{name: "json logging is registered", body: "logging: {format: json}\n"},
		{name: "unknown feature gate", body: "featureGates: {NoSuchGate: true}\n", wantErr: []string{root + "featureGates", "unrecognized feature gate: NoSuchGate"}},
		{name: "locked feature gate", body: "featureGates: {ServiceTrafficDistribution: false}\n", wantErr: []string{root + "featureGates"}},
		{name: "any Kubernetes gate", body: "featureGates: {KubeProxyNFTablesLocalhostNodePorts: true}\n"},
		{name: "all errors", body: "mode: bogus\noomScoreAdj: -2000\n", wantErr: []string{"Mode.ProxyMode", "OOMScoreAdj"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			obj := mustDefaulted(t, tc.body)
			ApplyPlatformDefaults(obj)
			Normalize(obj)
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
