package config

import (
	"fmt"
	"maps"
	"net/netip"
	"slices"

	"k8s.io/kube-proxy/config/v1alpha1"
)

// Complete applies the platform defaults to an already defaulted obj,
// validates it and builds the Config. Master, ConfigFile and
// ServiceProxyName are not part of v1alpha1; the caller sets them.
func Complete(obj *v1alpha1.KubeProxyConfiguration) (*Config, error) {
	ApplyPlatformDefaults(obj)
	if err := Validate(obj); err != nil {
		return nil, fmt.Errorf("invalid configuration: %w", err)
	}
	return fromVersioned(obj)
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
		Mode:                        Mode(obj.Mode),
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
	switch cfg.Mode {
	case ModeNFTables:
		cfg.SyncPeriod = obj.NFTables.SyncPeriod.Duration
		cfg.MinSyncPeriod = obj.NFTables.MinSyncPeriod.Duration
		cfg.MasqueradeAll = obj.NFTables.MasqueradeAll
		cfg.MasqueradeBit = derefInt(obj.NFTables.MasqueradeBit)
	case ModeIPVS:
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
	if obj.ClusterCIDR != "" {
		if cfg.ClusterCIDRs, err = parseCIDRList(obj.ClusterCIDR); err != nil {
			return nil, fmt.Errorf("clusterCIDR: %w", err)
		}
	}
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
	for _, s := range c.ExcludeCIDRs {
		p, err := netip.ParsePrefix(s)
		if err != nil {
			return IPVS{}, fmt.Errorf("ipvs.excludeCIDRs: %w", err)
		}
		out.ExcludeCIDRs = append(out.ExcludeCIDRs, p.Masked())
	}
	return out, nil
}

func derefInt(p *int32) int {
	if p == nil {
		return 0
	}
	return int(*p)
}

func derefBool(p *bool) bool { return p != nil && *p }

// Warnings returns the non-fatal remarks upstream logs at startup
// (checkBadConfig): unset nodePortAddresses and unknown feature gates.
func Warnings(obj *v1alpha1.KubeProxyConfiguration) []string {
	var out []string
	if len(obj.NodePortAddresses) == 0 {
		out = append(out, "nodePortAddresses is unset; NodePort connections will be accepted on all local IPs. Consider using `--nodeport-addresses primary`")
	}
	if unknown := UnknownFeatureGates(obj.FeatureGates); len(unknown) > 0 {
		out = append(out, fmt.Sprintf("featureGates: ignoring gates svcproxy does not know: %v", unknown))
	}
	return out
}
