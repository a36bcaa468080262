package app

import (
	"context"
	"errors"
	"fmt"

	"github.com/svcproxy/svcproxy/internal/config"
	"github.com/svcproxy/svcproxy/internal/metrics"
	"github.com/svcproxy/svcproxy/internal/syncer"
	"github.com/svcproxy/svcproxy/pkg/proxy"
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
	case config.ModeNFTables:
		return nil
	default:
		return fmt.Errorf("proxy mode %q: %w", mode, errModeNotImplemented)
	}
}

// newProxier returns the backend for cfg.Mode and one IP family.
func newProxier(cfg *config.Config, family proxy.IPFamily) (syncer.Proxier, error) {
	switch cfg.Mode {
	case config.ModeNFTables:
		return nftables.New(family)
	default:
		return nil, fmt.Errorf("proxy mode %q: %w", cfg.Mode, errModeNotImplemented)
	}
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

// cleanupOtherModes removes what other modes left behind, as upstream does
// at start: nftables mode removes iptables and IPVS leftovers; iptables and
// IPVS modes remove the nftables tables (iptables↔IPVS leftovers stay,
// KEP-2448).
func cleanupOtherModes(ctx context.Context, mode config.Mode) error {
	switch mode {
	case config.ModeNFTables:
		// The iptables and IPVS backends' leftover cleanup plugs in here.
		return nil
	default:
		return nftables.CleanupTables(ctx)
	}
}

// cleanupAll removes the rules of every mode (--cleanup).
func cleanupAll(ctx context.Context) error {
	var errs []error
	if err := nftables.CleanupTables(ctx); err != nil {
		errs = append(errs, fmt.Errorf("nftables: %w", err))
	}
	return errors.Join(errs...)
}
