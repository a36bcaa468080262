package app

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"

	"k8s.io/klog/v2"

	"github.com/svcproxy/svcproxy/internal/config"
	"github.com/svcproxy/svcproxy/internal/metrics"
	"github.com/svcproxy/svcproxy/internal/syncer"
	"github.com/svcproxy/svcproxy/pkg/kiptables"
	"github.com/svcproxy/svcproxy/pkg/knfacct"
	"github.com/svcproxy/svcproxy/pkg/proxy"
	"github.com/svcproxy/svcproxy/pkg/proxy/iptables"
	"github.com/svcproxy/svcproxy/pkg/proxy/ipvs"
	"github.com/svcproxy/svcproxy/pkg/proxy/nftables"
)

// This file is the one place that knows which backends exist.

// errModeNotImplemented is returned for a mode whose backend is not built yet,
// so that svcproxy never pretends to proxy.
var errModeNotImplemented = errors.New("not implemented yet")

// checkMode fails for a mode whose backend is not wired yet, before any API
// or kernel work starts.
func checkMode(mode config.Mode) error {
	switch mode {
	case config.ModeNFTables, config.ModeIPTables, config.ModeIPVS:
		return nil
	default:
		return fmt.Errorf("proxy mode %q: %w", mode, errModeNotImplemented)
	}
}

// iptablesFlavour detects, once for both families' proxiers, the iptables
// flavour that iptables and IPVS modes drive ("" in nftables mode, which
// needs none).
func iptablesFlavour(ctx context.Context, mode config.Mode) kiptables.Flavour {
	if mode == config.ModeNFTables {
		return ""
	}
	return kiptables.DetectFlavour(ctx)
}

// newProxier returns the backend for cfg.Mode and one IP family; acct, if
// not nil, holds the nfacct objects iptables mode counts into; flavour is
// iptablesFlavour's.
func newProxier(ctx context.Context, cfg *config.Config, family proxy.IPFamily, acct knfacct.Interface, flavour kiptables.Flavour) (syncer.Proxier, error) {
	switch cfg.Mode {
	case config.ModeNFTables:
		return nftables.New(family, nftables.Options{})
	case config.ModeIPTables:
		return iptables.New(ctx, family, iptables.Options{
			ConntrackTCPBeLiberal: tcpBeLiberal(),
			SyncPeriod:            cfg.SyncPeriod,
			NFAcct:                acct,
			Flavour:               flavour,
		})
	case config.ModeIPVS:
		return ipvs.New(family, ipvs.Options{
			ExcludeCIDRs:  cfg.IPVS.ExcludeCIDRs,
			StrictARP:     cfg.IPVS.StrictARP,
			TCPTimeout:    cfg.IPVS.TCPTimeout,
			TCPFinTimeout: cfg.IPVS.TCPFinTimeout,
			UDPTimeout:    cfg.IPVS.UDPTimeout,
			Flavour:       flavour,
		})
	default:
		return nil, fmt.Errorf("proxy mode %q: %w", cfg.Mode, errModeNotImplemented)
	}
}

// openNFAcct opens, in iptables mode, the nfacct client the backend
// counts with and the metrics read. On a kernel without nfnetlink_acct it
// logs, as upstream does, and returns nil: the rules then have no nfacct
// match and the two kubeproxy_iptables_*_packets_total metrics no sample.
func openNFAcct(ctx context.Context, mode config.Mode) (acct knfacct.Interface, closeFn func()) {
	if mode != config.ModeIPTables {
		return nil, func() {}
	}
	c, err := knfacct.New()
	if err != nil {
		klog.FromContext(ctx).Error(err, "Failed to create nfacct runner, nfacct based metrics won't be available")
		return nil, func() {}
	}
	return c, c.Close
}

// tcpBeLiberal reads nf_conntrack_tcp_be_liberal: when set, the kernel
// accepts out-of-window TCP packets and no INVALID-drop rule is needed.
func tcpBeLiberal() bool {
	b, err := os.ReadFile("/proc/sys/net/netfilter/nf_conntrack_tcp_be_liberal")
	return err == nil && strings.TrimSpace(string(b)) != "0"
}

// metricsMode names cfg.Mode as the metrics package does.
func metricsMode(mode config.Mode) string {
	switch mode {
	case config.ModeIPVS:
		return metrics.ModeIPVS
	case config.ModeNFTables:
		return metrics.ModeNFTables
	default:
		return metrics.ModeIPTables
	}
}
