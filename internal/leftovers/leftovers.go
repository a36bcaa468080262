// Package leftovers removes what other proxy modes left in the kernel:
// at start, the modes svcproxy is not running in (OtherModes), and every
// mode for --cleanup (All). It is the one place that knows which kernel
// objects each mode leaves behind.
package leftovers

import (
	"context"
	"errors"
	"fmt"

	"k8s.io/klog/v2"

	"github.com/svcproxy/svcproxy/internal/config"
	"github.com/svcproxy/svcproxy/pkg/kiptables"
	"github.com/svcproxy/svcproxy/pkg/proxy"
	"github.com/svcproxy/svcproxy/pkg/proxy/iptables"
	"github.com/svcproxy/svcproxy/pkg/proxy/ipvs"
	"github.com/svcproxy/svcproxy/pkg/proxy/nftables"
)

// OtherModes removes what other modes left behind, as upstream does at
// start: nftables mode removes iptables and IPVS leftovers; iptables and
// IPVS modes remove the nftables tables (iptables↔IPVS leftovers stay,
// KEP-2448). IPVS mode's go first: its chains share names with iptables
// mode's (KUBE-SERVICES, KUBE-MARK-MASQ, KUBE-POSTROUTING,
// KUBE-PROXY-FIREWALL, …) and its own chains jump to them, so the iptables
// cleanup, which knows only iptables mode's chains, cannot delete those
// while IPVS mode's are there, and the kernel refuses its whole restore.
// The IPVS cleanup removes all of IPVS mode's chains, the shared names
// included.
func OtherModes(ctx context.Context, mode config.Mode) error {
	switch mode {
	case config.ModeNFTables:
		ipvsErr := cleanupIPVS(ctx)
		return errors.Join(ipvsErr, iptables.CleanupLeftovers(ctx))
	default:
		return nftables.CleanupTables(ctx)
	}
}

// All removes the rules of every mode (--cleanup).
func All(ctx context.Context) error {
	var errs []error
	if err := nftables.CleanupTables(ctx); err != nil {
		errs = append(errs, fmt.Errorf("nftables: %w", err))
	}
	if err := iptables.CleanupLeftovers(ctx); err != nil {
		errs = append(errs, fmt.Errorf("iptables: %w", err))
	}
	if err := cleanupIPVS(ctx); err != nil {
		errs = append(errs, fmt.Errorf("ipvs: %w", err))
	}
	return errors.Join(errs...)
}

// cleanupIPVS removes the virtual servers IPVS mode made (never a node's other
// IPVS users', see ipvs.Proxier.Cleanup), kube-ipvs0 and the ipsets. A
// kernel without IPVS has nothing to clean. What is there is read first:
// creating the clients runs modprobe and the iptables tools.
func cleanupIPVS(ctx context.Context) error {
	logger := klog.FromContext(ctx)
	switch present, what, err := ipvs.LeftoversPresent(); {
	case err != nil:
		logger.Error(err, "Cannot tell whether IPVS mode left anything; cleaning up")
	case !present:
		logger.V(2).Info("No IPVS mode leftovers")
		return nil
	default:
		logger.Info("Removing IPVS mode's leftovers", "found", what)
	}
	var errs []error
	opts := ipvs.Options{ReapInterval: -1, Flavour: kiptables.DetectFlavour(ctx)}
	for _, family := range proxy.Families {
		p, err := ipvs.New(family, opts)
		if err != nil {
			logger.V(2).Info("IPVS is not available; nothing to clean", "family", family, "err", err)
			continue
		}
		if err := p.Cleanup(ctx); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", family, err))
		}
		p.Close()
	}
	return errors.Join(errs...)
}
