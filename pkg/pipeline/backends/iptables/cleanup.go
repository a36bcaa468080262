package iptables

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/svcproxy/svcproxy/pkg/kiptables"
)

// The tables cleanup visits and, in each, the top-level chains it removes
// when present, beside every service chain. Like upstream's newest cleanup
// it leaves only KUBE-FIREWALL and its jumps, whose original kubelet owns.
var cleanupTables = []cleanupTable{
	{kiptables.TableNAT, []string{chainServices, chainNodePorts, chainPostrouting, chainMarkMasq, chainCanary}},
	{kiptables.TableFilter, []string{chainServices, chainExternalServices, chainForward, chainNodePorts, chainProxyFirewall, chainCanary}},
	{kiptables.TableMangle, []string{chainCanary}},
}

// cleanupTable is one table cleanup visits and its top-level chains.
type cleanupTable struct {
	table kiptables.Table
	fixed []string
}

// doomed names, per table, the chains of ours that cleanup removes.
type doomed map[kiptables.Table][]string

// pick keeps, of names (one table's chains), those cleanup removes.
func (d doomed) pick(table kiptables.Table, fixed []string, names []string) {
	for _, n := range names {
		if isServiceChain(n) || slices.Contains(fixed, n) {
			d[table] = append(d[table], n)
		}
	}
}

// cleanup removes our chains from every table, found with iptables-save
// (Proxier.Cleanup, --cleanup in iptables mode).
func cleanup(ctx context.Context, ipt kiptables.Interface) error {
	found, err := savedChains(ctx, ipt, nil)
	return errors.Join(err, removeChains(ctx, ipt, found))
}

// savedChains reads our chains with iptables-save, from the cleanup tables
// that only lists (all when nil). A table that cannot be read is an error,
// not a reason to skip the others.
func savedChains(ctx context.Context, ipt kiptables.Interface, only []kiptables.Table) (doomed, error) {
	found := doomed{}
	var errs []error
	for _, t := range cleanupTables {
		if only != nil && !slices.Contains(only, t.table) {
			continue
		}
		save, err := ipt.Save(ctx, t.table)
		if err != nil {
			errs = append(errs, fmt.Errorf("cleanup of %s: %w", t.table, err))
			continue
		}
		var names []string
		for _, line := range bytes.Split(save, []byte("\n")) {
			if len(line) > 0 && line[0] == ':' {
				name, _, _ := bytes.Cut(line[1:], []byte(" "))
				names = append(names, string(name))
			}
		}
		found.pick(t.table, t.fixed, names)
	}
	return found, errors.Join(errs...)
}

// removeChains removes our jumps to the chains found, then flushes and
// deletes the chains with one restore per table. Errors are collected, not
// fatal, so one broken table does not keep the others dirty. A jump cannot
// outlive the chain it targets, so with no chain found nothing runs.
func removeChains(ctx context.Context, ipt kiptables.Interface, found doomed) error {
	var errs []error
	for _, j := range jumps {
		if !slices.Contains(found[j.table], j.to) {
			continue
		}
		if err := ipt.DeleteRule(ctx, j.table, j.from, j.args()...); err != nil {
			errs = append(errs, err)
		}
	}
	for _, t := range cleanupTables {
		chains := found[t.table]
		if len(chains) == 0 {
			continue
		}
		var b lineBuffer
		b.line("*" + string(t.table))
		for _, c := range chains {
			b.chainLine(c) // flush first, so references between them vanish
		}
		for _, c := range chains {
			b.line("-X", c)
		}
		b.line("COMMIT")
		if err := ipt.Restore(ctx, b.bytes()...); err != nil {
			errs = append(errs, fmt.Errorf("cleanup of %s: %w", t.table, err))
		}
	}
	return errors.Join(errs...)
}
