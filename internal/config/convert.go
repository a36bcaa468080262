package config

import (
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation/field"
	logsapi "k8s.io/component-base/logs/api/v1"
	"k8s.io/kube-proxy/config/v1alpha1"
	netutils "k8s.io/utils/net"

	"github.com/svcproxy/svcproxy/pkg/proxy"
)

// Complete applies the platform defaults to an already defaulted obj,
// validates it and builds the Config. Master, ConfigFile and
// ServiceProxyName are not part of v1alpha1; the caller sets them.
func Complete(obj *v1alpha1.KubeProxyConfiguration) (*Config, error) {
	modeDefaulted := obj.Mode == ""
	ApplyPlatformDefaults(obj)
	Normalize(obj)
	// Upstream sets the gates, then applies logging, then validates; each
	// step fails on its own, with its own message.
	gate, err := NewFeatureGate(obj.FeatureGates)
	if err != nil {
		return nil, err
	}
	if errs := logsapi.Validate(&obj.Logging, gate, field.NewPath("logging")); len(errs) > 0 {
		return nil, fmt.Errorf("initialize logging: %w", errs.ToAggregate())
	}
	if err := Validate(obj); err != nil {
		return nil, fmt.Errorf("invalid configuration: %w", err)
	}
	cfg, err := fromVersioned(obj)
	if err != nil {
		return nil, err
	}
	cfg.ModeDefaulted = modeDefaulted
	return cfg, nil
}

// fromVersioned maps a validated object to Config with the conversion rules
// of contract §2.2: one SyncPeriod/MinSyncPeriod/MasqueradeAll, taken from
// the section of the mode; ipvs uses iptables.masqueradeBit.
func fromVersioned(obj *v1alpha1.KubeProxyConfiguration) (*Config, error) {
	bind, err := netip.ParseAddr(obj.BindAddress)
	if err != nil {
		return nil, fmt.Errorf("bindAddress: %w", err)
	}
	cfg := &Config{
		Mode:                        proxy.Mode(obj.Mode),
		HostnameOverride:            obj.HostnameOverride,
		BindAddress:                 bind,
		HealthzBindAddress:          obj.HealthzBindAddress,
		MetricsBindAddress:          obj.MetricsBindAddress,
		BindAddressHardFail:         obj.BindAddressHardFail,
		EnableProfiling:             obj.EnableProfiling,
		ShowHiddenMetricsForVersion: obj.ShowHiddenMetricsForVersion,
		ConfigSyncPeriod:            obj.ConfigSyncPeriod.Duration,
		LocalhostNodePorts:          derefBool(obj.IPTables.LocalhostNodePorts),
		DetectLocalMode:             LocalMode(obj.DetectLocalMode),
		BridgeInterface:             obj.DetectLocal.BridgeInterface,
		InterfaceNamePrefix:         obj.DetectLocal.InterfaceNamePrefix,
		NodePortAddresses:           slices.Clone(obj.NodePortAddresses),
		OOMScoreAdj:                 derefInt(obj.OOMScoreAdj),
		Conntrack:                   conntrackFrom(&obj.Conntrack),
		ClientConnection: ClientConnection{
			Kubeconfig:         obj.ClientConnection.Kubeconfig,
			AcceptContentTypes: obj.ClientConnection.AcceptContentTypes,
			ContentType:        obj.ClientConnection.ContentType,
			QPS:                obj.ClientConnection.QPS,
			Burst:              obj.ClientConnection.Burst,
		},
		FeatureGates: maps.Clone(obj.FeatureGates),
		Kubeconfig:   obj.ClientConnection.Kubeconfig,
		Versioned:    obj.DeepCopy(),
	}
	switch {
	case cfg.Mode.UsesNFTablesSection():
		cfg.SyncPeriod = obj.NFTables.SyncPeriod.Duration
		cfg.MinSyncPeriod = obj.NFTables.MinSyncPeriod.Duration
		cfg.MasqueradeAll = obj.NFTables.MasqueradeAll
		cfg.MasqueradeBit = derefInt(obj.NFTables.MasqueradeBit)
	case cfg.Mode == proxy.ModeIPVS:
		cfg.SyncPeriod = obj.IPVS.SyncPeriod.Duration
		cfg.MinSyncPeriod = obj.IPVS.MinSyncPeriod.Duration
		cfg.MasqueradeAll = obj.IPTables.MasqueradeAll
		cfg.MasqueradeBit = derefInt(obj.IPTables.MasqueradeBit)
	default:
		cfg.SyncPeriod = obj.IPTables.SyncPeriod.Duration
		cfg.MinSyncPeriod = obj.IPTables.MinSyncPeriod.Duration
		cfg.MasqueradeAll = obj.IPTables.MasqueradeAll
		cfg.MasqueradeBit = derefInt(obj.IPTables.MasqueradeBit)
	}
	if cfg.FeatureGate, err = NewFeatureGate(obj.FeatureGates); err != nil {
		return nil, fmt.Errorf("featureGates: %w", err)
	}
	cfg.ClusterCIDRs = parseCIDRList(obj.ClusterCIDR)
	if cfg.IPVS, err = ipvsFrom(&obj.IPVS); err != nil {
		return nil, err
	}
	return cfg, nil
}

func conntrackFrom(c *v1alpha1.KubeProxyConntrackConfiguration) Conntrack {
	out := Conntrack{
		MaxPerCore:       derefInt(c.MaxPerCore),
		Min:              derefInt(c.Min),
		TCPBeLiberal:     c.TCPBeLiberal,
		UDPTimeout:       c.UDPTimeout.Duration,
		UDPStreamTimeout: c.UDPStreamTimeout.Duration,
	}
	if c.TCPEstablishedTimeout != nil {
		out.TCPEstablishedTimeout = c.TCPEstablishedTimeout.Duration
	}
	if c.TCPCloseWaitTimeout != nil {
		out.TCPCloseWaitTimeout = c.TCPCloseWaitTimeout.Duration
	}
	return out
}

func ipvsFrom(c *v1alpha1.KubeProxyIPVSConfiguration) (IPVS, error) {
	out := IPVS{
		Scheduler:     c.Scheduler,
		StrictARP:     c.StrictARP,
		TCPTimeout:    c.TCPTimeout.Duration,
		TCPFinTimeout: c.TCPFinTimeout.Duration,
		UDPTimeout:    c.UDPTimeout.Duration,
	}
	// Checked in ipvs mode, the only one that uses them; ignored otherwise.
	for _, s := range c.ExcludeCIDRs {
		if p, ok := parsePrefix(s); ok {
			out.ExcludeCIDRs = append(out.ExcludeCIDRs, p)
		}
	}
	return out, nil
}

// parseCIDRList splits a comma-separated list of CIDRs. Validation has
// checked the list in ClusterCIDR mode, the only mode that uses it; in the
// others upstream ignores it, so invalid entries are skipped here.
func parseCIDRList(s string) []netip.Prefix {
	var out []netip.Prefix
	if s == "" {
		return nil
	}
	for _, part := range strings.Split(s, ",") {
		if p, ok := parsePrefix(part); ok {
			out = append(out, p)
		}
	}
	return out
}

// parsePrefix parses a CIDR as upstream does (leading zeros allowed) and
// returns it masked.
func parsePrefix(s string) (netip.Prefix, bool) {
	_, ipnet, err := netutils.ParseCIDRSloppy(strings.TrimSpace(s))
	if err != nil {
		return netip.Prefix{}, false
	}
	addr, ok := netip.AddrFromSlice(ipnet.IP)
	if !ok {
		return netip.Prefix{}, false
	}
	ones, _ := ipnet.Mask.Size()
	if addr.Is4In6() && ones >= 96 {
		addr, ones = addr.Unmap(), ones-96
	}
	return netip.PrefixFrom(addr, ones).Masked(), true
}

func derefInt(p *int32) int {
	if p == nil {
		return 0
	}
	return int(*p)
}

func derefBool(p *bool) bool { return p != nil && *p }
