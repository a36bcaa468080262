package iptables

import (
	"context"
	"errors"
	"fmt"
	"os/exec"

	"k8s.io/klog/v2"

	"github.com/svcproxy/svcproxy/pkg/kiptables"
	"github.com/svcproxy/svcproxy/pkg/proxy"
)

// Top-level chains cleanup removes when present. Like upstream's newest
// cleanup it leaves only KUBE-FIREWALL and its jumps, whose original
// kubelet owns.
var (
	cleanupNAT    = []string{chainServices, chainNodePorts, chainPostrouting, chainMarkMasq, chainCanary}
	cleanupFilter = []string{chainServices, chainExternalServices, chainForward, chainNodePorts, chainProxyFirewall, chainCanary}
	cleanupMangle = []string{chainCanary}
)

// cleanup removes our jumps, then flushes and deletes our chains in each
// table with one restore per table. Errors are collected, not fatal, so
// one broken table does not keep the others dirty.
func cleanup(ctx context.Context, ipt kiptables.Interface) error {
	var errs []error
	for _, j := range jumps {
		if err := ipt.DeleteRule(ctx, j.table, j.from, j.args()...); err != nil {
			errs = append(errs, err)
		}
	}
	for _, t := range []struct {
		table  kiptables.Table
		chains []string
	}{{kiptables.TableNAT, cleanupNAT}, {kiptables.TableFilter, cleanupFilter}, {kiptables.TableMangle, cleanupMangle}} {
		if err := cleanupTable(ctx, ipt, t.table, t.chains); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func cleanupTable(ctx context.Context, ipt kiptables.Interface, table kiptables.Table, fixed []string) error {
	save, err := ipt.Save(ctx, table)
	if err != nil {
		return fmt.Errorf("cleanup of %s: %w", table, err)
	}
	var doomed []string
	for _, n := range kiptables.SavedChainNames(save) {
		if isServiceChain(n) || containsString(fixed, n) {
			doomed = append(doomed, n)
		}
	}
	if len(doomed) == 0 {
		return nil
	}
	var b lineBuffer
	b.line("*" + string(table))
	for _, c := range doomed {
		b.chainLine(c) // flush first, so references between them vanish
	}
	for _, c := range doomed {
		b.line("-X", c)
	}
	b.line("COMMIT")
	if err := ipt.Restore(ctx, b.bytes()...); err != nil {
		return fmt.Errorf("cleanup of %s: %w", table, err)
	}
	return nil
}

func containsString(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// CleanupLeftovers removes iptables-mode rules of both families, with the
// host's iptables flavour; nftables mode calls it at start. A family whose
// tools are missing has nothing to clean.
func CleanupLeftovers(ctx context.Context) error {
	flavour := kiptables.DetectFlavour(ctx)
	var errs []error
	for _, f := range proxy.Families {
		ipt, err := kiptables.New(f, flavour)
		if err != nil {
			if errors.Is(err, exec.ErrNotFound) {
				klog.V(2).InfoS("No iptables tools; nothing to clean", "ipFamily", f, "err", err)
				continue
			}
			errs = append(errs, fmt.Errorf("iptables %s: %w", f, err))
			continue
		}
		if err := cleanup(ctx, ipt); err != nil {
			errs = append(errs, fmt.Errorf("iptables %s: %w", f, err))
		}
	}
	return errors.Join(errs...)
}
