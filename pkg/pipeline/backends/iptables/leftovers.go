package iptables

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"slices"

	"k8s.io/klog/v2"

	"github.com/svcproxy/svcproxy/pkg/kiptables"
	"github.com/svcproxy/svcproxy/pkg/proxy"
)

// CleanupLeftovers removes iptables-mode rules of both families, in each
// iptables flavour that holds any; nftables mode calls it at start, and
// --cleanup. The kernel is read first, and the tools run only where it
// shows something to remove: iptables-nft's chains are nf_tables chains,
// listed over netlink; iptables-legacy's tables are listed in /proc, and
// only a listed table is read with iptables-legacy-save. On a node that
// never ran iptables mode no process starts (the tools cost seconds of
// CPU beside the first sync). A family whose tools are missing
// cannot be cleaned, which is logged.
func CleanupLeftovers(ctx context.Context) error {
	var errs []error
	for _, f := range proxy.Families {
		for _, fl := range []kiptables.Flavour{kiptables.FlavourNFT, kiptables.FlavourLegacy} {
			if err := cleanupFlavour(ctx, f, fl); err != nil {
				errs = append(errs, fmt.Errorf("iptables %s (%s): %w", f, fl, err))
			}
		}
	}
	return errors.Join(errs...)
}

// cleanupFlavour removes one flavour's leftovers in one family. If
// netlink cannot list iptables-nft's chains, iptables-nft-save does, as
// before.
func cleanupFlavour(ctx context.Context, f proxy.IPFamily, fl kiptables.Flavour) error {
	var found doomed // nil: to be read with the tool
	var only []kiptables.Table
	if fl == kiptables.FlavourNFT {
		var err error
		found, err = nftChains(f)
		if err != nil {
			klog.FromContext(ctx).V(2).Info("Cannot list iptables-nft's chains over netlink; reading them with the tool", "ipFamily", f, "err", err)
			found = nil
		} else if len(found) == 0 {
			return nil
		}
	} else {
		tables, err := kiptables.LegacyTables(f)
		if !slices.ContainsFunc(tables, isCleanupTable) {
			return err
		}
		only = tables
	}
	ipt, err := newCleanupClient(ctx, f, fl)
	if ipt == nil {
		return err
	}
	var readErr error
	if found == nil {
		if found, readErr = savedChains(ctx, ipt, only); len(found) == 0 {
			return readErr
		}
	}
	klog.FromContext(ctx).Info("Removing iptables mode's leftovers", "ipFamily", f, "flavour", fl)
	return errors.Join(readErr, removeChains(ctx, ipt, found))
}

// isCleanupTable reports whether cleanup visits table.
func isCleanupTable(table kiptables.Table) bool {
	return slices.ContainsFunc(cleanupTables, func(t cleanupTable) bool { return t.table == table })
}

// nftChains reads our chains in iptables-nft's tables over netlink.
func nftChains(f proxy.IPFamily) (doomed, error) {
	found := doomed{}
	var errs []error
	for _, t := range cleanupTables {
		names, err := kiptables.NFTChains(f, t.table)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		found.pick(t.table, t.fixed, names)
	}
	return found, errors.Join(errs...)
}

// newCleanupClient returns the client of one flavour and family; without
// its tools, nil and no error (logged: nothing can be removed).
func newCleanupClient(ctx context.Context, f proxy.IPFamily, fl kiptables.Flavour) (kiptables.Interface, error) {
	ipt, err := kiptables.New(f, fl)
	if errors.Is(err, exec.ErrNotFound) {
		klog.FromContext(ctx).Info("iptables mode's leftovers found, but no tools to remove them", "ipFamily", f, "flavour", fl, "err", err)
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return ipt, nil
}
