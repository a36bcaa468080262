package app

import (
	"strings"
	"testing"
	"time"

	"github.com/svcproxy/svcproxy/pkg/proxy"
)

// TestFlagDefaults checks each §1.2 flag exists with upstream's default.
func TestFlagDefaults(t *testing.T) {
	want := map[string]string{
		"config": "", "write-config-to": "", "cleanup": "false", "init-only": "false",
		"master": "", "kubeconfig": "",
		"kube-api-content-type": "application/vnd.kubernetes.protobuf",
		"kube-api-qps":          "5", "kube-api-burst": "10",
		"hostname-override": "", "bind-address": "0.0.0.0", "bind-address-hard-fail": "false",
		"healthz-bind-address": "0.0.0.0:10256", "metrics-bind-address": "127.0.0.1:10249",
		"profiling": "false", "show-hidden-metrics-for-version": "", "proxy-mode": "",
		"feature-gates": "", "detect-local-mode": "", "cluster-cidr": "",
		"pod-bridge-interface": "", "pod-interface-name-prefix": "", "nodeport-addresses": "[]",
		"masquerade-all": "false", "iptables-masquerade-bit": "14",
		"iptables-localhost-nodeports": "true", "iptables-sync-period": "30s",
		"iptables-min-sync-period": "1s", "ipvs-sync-period": "30s", "ipvs-min-sync-period": "1s",
		"ipvs-scheduler": "", "ipvs-exclude-cidrs": "[]", "ipvs-strict-arp": "false",
		"ipvs-tcp-timeout": "0s", "ipvs-tcpfin-timeout": "0s", "ipvs-udp-timeout": "0s",
		"conntrack-max-per-core": "32768", "conntrack-min": "131072",
		"conntrack-tcp-timeout-established": "24h0m0s", "conntrack-tcp-timeout-close-wait": "1h0m0s",
		"conntrack-tcp-be-liberal": "false", "conntrack-udp-timeout": "0s",
		"conntrack-udp-timeout-stream": "0s", "config-sync-period": "15m0s", "oom-score-adj": "-999",
		"healthz-port": "10256", "metrics-port": "10249",
		"v": "0", "vmodule": "", "logging-format": "text", "log-flush-frequency": "5s",
		"version": "false", "service-proxy-name": "",
	}
	fs := NewCommand().Flags()
	for name, def := range want {
		f := fs.Lookup(name)
		if f == nil {
			t.Errorf("flag --%s missing", name)
			continue
		}
		if f.DefValue != def {
			t.Errorf("--%s default = %q, want %q", name, f.DefValue, def)
		}
	}
	for _, name := range []string{"healthz-port", "metrics-port"} {
		if fs.Lookup(name).Deprecated == "" {
			t.Errorf("--%s is not marked deprecated", name)
		}
	}
	if fs.Lookup("proxy-port-range") != nil {
		t.Error("--proxy-port-range is gone upstream in 1.37; it must be an unknown flag")
	}
	if fs.Lookup("v").Shorthand != "v" {
		t.Error("-v shorthand missing")
	}
}

func TestFlagsOnlyMapping(t *testing.T) {
	for _, tc := range []struct {
		name          string
		args          []string
		sync, minSync time.Duration
		masqAll       bool
	}{
		{"defaults", nil, 30 * time.Second, time.Second, false},
		{"iptables periods", []string{"--iptables-sync-period=7s", "--iptables-min-sync-period=2s", "--masquerade-all"}, 7 * time.Second, 2 * time.Second, true},
		{"iptables flags fill nftables", []string{"--proxy-mode=nftables", "--iptables-sync-period=7s", "--iptables-min-sync-period=2s", "--masquerade-all"}, 7 * time.Second, 2 * time.Second, true},
		{"ipvs flags ignored outside ipvs", []string{"--ipvs-sync-period=9s", "--ipvs-min-sync-period=3s"}, 30 * time.Second, time.Second, false},
		{"ipvs mode uses ipvs flags", []string{"--proxy-mode=ipvs", "--iptables-sync-period=7s", "--ipvs-sync-period=9s", "--ipvs-min-sync-period=3s", "--masquerade-all"}, 9 * time.Second, 3 * time.Second, true},
		// Upstream's flags share one period pair defaulted from iptables: 1s.
		{"ipvs mode min default", []string{"--proxy-mode=ipvs"}, 30 * time.Second, time.Second, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := mustRun(t, tc.args...)
			if cfg.SyncPeriod != tc.sync || cfg.MinSyncPeriod != tc.minSync || cfg.MasqueradeAll != tc.masqAll {
				t.Errorf("sync %s min %s masqAll %v, want %s %s %v",
					cfg.SyncPeriod, cfg.MinSyncPeriod, cfg.MasqueradeAll, tc.sync, tc.minSync, tc.masqAll)
			}
		})
	}
}

func TestFlagsOnlyValues(t *testing.T) {
	cfg := mustRun(t, "--proxy-mode=nftables", "--cluster-cidr=10.244.0.0/16,fd00::/48",
		"--nodeport-addresses=10.0.0.0/8", "--kubeconfig=/k", "--master=https://api:6443",
		"--kube-api-qps=50", "--feature-gates=LoggingBetaOptions=true", "--oom-score-adj=-500",
		"--conntrack-max-per-core=0", "--detect-local-mode=NodeCIDR", "--service-proxy-name=mine",
		"--bind-address=10.1.2.3", "--metrics-bind-address=", "--hostname-override=Node-1", "--watch-node-addresses")
	checks := []struct {
		name      string
		got, want any
	}{
		{"Mode", string(cfg.Mode), "nftables"},
		{"ClusterCIDRs", len(cfg.ClusterCIDRs), 2},
		{"NodePortAddresses", strings.Join(cfg.NodePortAddresses, ","), "10.0.0.0/8"},
		{"Kubeconfig", cfg.Kubeconfig, "/k"},
		{"Master", cfg.Master, "https://api:6443"},
		{"QPS", cfg.ClientConnection.QPS, float32(50)},
		{"FeatureGates", cfg.FeatureGates["LoggingBetaOptions"], true},
		{"OOMScoreAdj", cfg.OOMScoreAdj, -500},
		{"MaxPerCore", cfg.Conntrack.MaxPerCore, 0},
		{"DetectLocalMode", string(cfg.DetectLocalMode), "NodeCIDR"},
		{"ServiceProxyName", cfg.ServiceProxyName, "mine"},
		{"WatchNodeAddresses", cfg.WatchNodeAddresses, true},
		{"BindAddress", cfg.BindAddress.String(), "10.1.2.3"},
		// An empty value keeps the default, as upstream's IPPortVar does.
		{"MetricsBindAddress", cfg.MetricsBindAddress, "127.0.0.1:10249"},
		{"HealthzBindAddress", cfg.HealthzBindAddress, "0.0.0.0:10256"},
		{"HostnameOverride", cfg.HostnameOverride, "node-1"},
		{"ConfigFile", cfg.ConfigFile, ""},
	}
	for _, c := range checks {
		if c.got != c.want {
			t.Errorf("%s = %v, want %v", c.name, c.got, c.want)
		}
	}
}

// TestWatchNodeAddressesOffByDefault: watching every Node costs every proxy
// every Node's status updates; it is the operator's choice.
func TestWatchNodeAddressesOffByDefault(t *testing.T) {
	if cfg := mustRun(t, "--hostname-override=n1"); cfg.WatchNodeAddresses {
		t.Error("--watch-node-addresses is on by default")
	}
	path := writeFile(t, "config.yaml", "apiVersion: kubeproxy.config.k8s.io/v1alpha1\nkind: KubeProxyConfiguration\n")
	if cfg := mustRun(t, "--hostname-override=n1", "--config="+path, "--watch-node-addresses"); !cfg.WatchNodeAddresses {
		t.Error("--watch-node-addresses does not apply with --config")
	}
}

// TestExternalLBAlgorithmFlag: random unless set, applies with --config
// too, and a value that names no algorithm stops the start, as any other
// invalid flag does (the operator typed it; a Service's annotation is only
// ignored).
func TestExternalLBAlgorithmFlag(t *testing.T) {
	if cfg := mustRun(t, "--hostname-override=n1"); cfg.ExternalBalancing != proxy.BalanceRandom {
		t.Errorf("default %q, want random", cfg.ExternalBalancing)
	}
	path := writeFile(t, "config.yaml", "apiVersion: kubeproxy.config.k8s.io/v1alpha1\nkind: KubeProxyConfiguration\n")
	if cfg := mustRun(t, "--hostname-override=n1", "--config="+path, "--external-lb-algorithm=maglev"); cfg.ExternalBalancing != proxy.BalanceMaglev {
		t.Errorf("with --config: %q, want maglev", cfg.ExternalBalancing)
	}
	res := execute(t, nil, "--hostname-override=n1", "--external-lb-algorithm=ring-hash")
	if res.err == nil || !strings.Contains(res.err.Error(), "--external-lb-algorithm") || res.action != "" {
		t.Errorf("ring-hash: err %v, action %q; want an error naming the flag and nothing run", res.err, res.action)
	}
}

// TestDeprecatedPortFlags checks upstream's rules: the port flags (default
// 10256, 10249) give a bare IP its port, leave an address that has one
// alone, and 0 disables the server.
func TestDeprecatedPortFlags(t *testing.T) {
	cfg := mustRun(t, "--healthz-port=0", "--metrics-port=12345")
	if cfg.HealthzBindAddress != "" {
		t.Errorf("--healthz-port=0: HealthzBindAddress = %q, want disabled", cfg.HealthzBindAddress)
	}
	if cfg.MetricsBindAddress != "127.0.0.1:10249" {
		t.Errorf("--metrics-port=12345: MetricsBindAddress = %q, want the default kept", cfg.MetricsBindAddress)
	}
	cfg = mustRun(t, "--healthz-bind-address=::1", "--healthz-port=2", "--metrics-bind-address=0.0.0.0")
	if cfg.HealthzBindAddress != "[::1]:2" || cfg.MetricsBindAddress != "0.0.0.0:10249" {
		t.Errorf("bare IPs: HealthzBindAddress = %q MetricsBindAddress = %q, want [::1]:2 0.0.0.0:10249",
			cfg.HealthzBindAddress, cfg.MetricsBindAddress)
	}
	cfg = mustRun(t, "--healthz-bind-address=", "--bind-address=")
	if cfg.HealthzBindAddress != "0.0.0.0:10256" || cfg.BindAddress.String() != "0.0.0.0" {
		t.Errorf("empty values: HealthzBindAddress = %q BindAddress = %s, want the defaults", cfg.HealthzBindAddress, cfg.BindAddress)
	}
}

func TestRemovedFlags(t *testing.T) {
	for name, hint := range removedFlags {
		for _, arg := range []string{"--" + name, "--" + name + "=5"} {
			res := execute(t, nil, arg)
			if res.err == nil {
				t.Errorf("%s accepted", arg)
				continue
			}
			if !strings.Contains(res.err.Error(), "--"+name+" was removed") || !strings.Contains(res.err.Error(), hint) {
				t.Errorf("%s: error %q does not name the flag and its replacement", arg, res.err)
			}
			if res.action != "" {
				t.Errorf("%s: action %q ran", arg, res.action)
			}
		}
	}
	if !strings.Contains(removedFlags["conntrack-max"], "--conntrack-max-per-core") {
		t.Error("--conntrack-max must point at --conntrack-max-per-core")
	}
}

// TestFlagzOmitsRemovedFlags: /flagz lists kube-proxy's flags
// (Config.Flags), and the removed flags that only refuse themselves are not
// among them; before 19949ff they were listed with empty values.
func TestFlagzOmitsRemovedFlags(t *testing.T) {
	flags := mustRun(t, "--proxy-mode=nftables").Flags
	for name := range removedFlags {
		if v, listed := flags[name]; listed {
			t.Errorf("/flagz lists the removed flag --%s (value %q)", name, v)
		}
	}
	// The filter must not drop the real flags with them.
	for name, want := range map[string]string{"proxy-mode": "nftables", "iptables-sync-period": "30s", "v": "0"} {
		if got, listed := flags[name]; !listed || got != want {
			t.Errorf("/flagz --%s = %q (listed %v), want %q", name, got, listed, want)
		}
	}
}

func TestUnderscoreFlagNames(t *testing.T) {
	cfg := mustRun(t, "--proxy_mode=ipvs")
	if cfg.Mode != "ipvs" {
		t.Errorf("--proxy_mode not normalised, mode %q", cfg.Mode)
	}
}

func TestInvalidFlagConfigRejected(t *testing.T) {
	res := execute(t, nil, "--iptables-sync-period=1s", "--iptables-min-sync-period=5s")
	if res.err == nil || !strings.Contains(res.err.Error(), "KubeProxyConfiguration.SyncPeriod") {
		t.Fatalf("err = %v, want it to name KubeProxyConfiguration.SyncPeriod", res.err)
	}
	if res.action != "" {
		t.Errorf("action %q ran with an invalid config", res.action)
	}
	if res := execute(t, nil, "extra-arg"); res.err == nil {
		t.Error("positional argument accepted")
	}
}

// TestExternalForwardingFlag: snat unless set, applies with --config too,
// and a value that names no method stops the start, as
// --external-lb-algorithm does.
func TestExternalForwardingFlag(t *testing.T) {
	if cfg := mustRun(t, "--hostname-override=n1"); cfg.ExternalForwarding != proxy.ForwardSNAT {
		t.Errorf("default %q, want snat", cfg.ExternalForwarding)
	}
	path := writeFile(t, "config.yaml", configHeader)
	if cfg := mustRun(t, "--hostname-override=n1", "--config="+path, "--external-forwarding=dsr"); cfg.ExternalForwarding != proxy.ForwardDSR {
		t.Errorf("with --config: %q, want dsr", cfg.ExternalForwarding)
	}
	// Every mode accepts it: only ebpf mode with --bpf-dsr tunnels.
	if cfg := mustRun(t, "--hostname-override=n1", "--proxy-mode=iptables", "--external-forwarding=dsr"); cfg.ExternalForwarding != proxy.ForwardDSR {
		t.Errorf("iptables mode: %q, want dsr", cfg.ExternalForwarding)
	}
	res := execute(t, nil, "--hostname-override=n1", "--external-forwarding=tunnel")
	if res.err == nil || !strings.Contains(res.err.Error(), "--external-forwarding") || res.action != "" {
		t.Errorf("tunnel: err %v, action %q; want an error naming the flag and nothing run", res.err, res.action)
	}
}

// TestBPFDSRFlags: off by default with the namespace of
// deploy/components/dsr; accepted with ebpf mode and tc interfaces, with
// --config too; refused, naming what is missing, in another mode or
// without --bpf-tc-interfaces, before anything runs.
func TestBPFDSRFlags(t *testing.T) {
	cfg := mustRun(t, "--hostname-override=n1")
	if cfg.BPFDSR || cfg.BPFDSRNamespace != "svcproxy-dsr" {
		t.Errorf("defaults: BPFDSR %t, namespace %q; want off, svcproxy-dsr", cfg.BPFDSR, cfg.BPFDSRNamespace)
	}
	on := mustRun(t, "--hostname-override=n1", "--proxy-mode=ebpf", "--bpf-tc-interfaces=eth0", "--bpf-dsr", "--bpf-dsr-namespace=dsr")
	if !on.BPFDSR || on.BPFDSRNamespace != "dsr" {
		t.Errorf("--bpf-dsr --bpf-dsr-namespace=dsr gave %t, %q", on.BPFDSR, on.BPFDSRNamespace)
	}
	path := writeFile(t, "config.yaml", configHeader+"mode: ebpf\n")
	if file := mustRun(t, "--hostname-override=n1", "--config="+path, "--bpf-tc-interfaces=eth0", "--bpf-dsr"); !file.BPFDSR {
		t.Error("--bpf-dsr does not apply with --config")
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--proxy-mode=nftables", "--bpf-tc-interfaces=eth0", "--bpf-dsr"}, "--proxy-mode=ebpf"},
		{[]string{"--config=" + writeFile(t, "nft.yaml", configHeader+"mode: nftables\n"), "--bpf-tc-interfaces=eth0", "--bpf-dsr"}, "--proxy-mode=ebpf"},
		{[]string{"--proxy-mode=ebpf", "--bpf-dsr"}, "--bpf-tc-interfaces"},
		{[]string{"--proxy-mode=ebpf", "--bpf-tc-interfaces=eth0", "--bpf-dsr", "--bpf-dsr-namespace="}, "--bpf-dsr-namespace"},
	} {
		res := execute(t, nil, append([]string{"--hostname-override=n1"}, tc.args...)...)
		if res.err == nil || !strings.Contains(res.err.Error(), tc.want) || res.action != "" {
			t.Errorf("%v: err %v, action %q; want an error naming %s and nothing run", tc.args, res.err, res.action, tc.want)
		}
	}
}
