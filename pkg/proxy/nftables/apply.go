package nftables

import (
	"context"
	"fmt"

	"sigs.k8s.io/knftables"
)

// defaultMaxOps bounds one transaction. The kernel holds the nfnetlink
// mutex for a whole transaction and the nft child parses all of it at once,
// so a cold start is split rather than sent as one giant batch.
const defaultMaxOps = 10000

// applyStats describes what one sync sent to the kernel.
type applyStats struct {
	transactions int
	operations   int
	// netlinkOps of the operations went as netlink element batches.
	netlinkOps int
}

// apply runs units in order, packed into transactions of at most maxOps
// operations (a unit is never split). After each committed transaction the
// kernel side of the store is updated, so a failure part-way leaves the
// store true to the kernel.
//
// With ew, a transaction's runs of element units that ew encodes are
// committed as netlink batches, and the units around them through run, in
// order: a transaction may become several, each of them a prefix-closed
// step of the same sequence, which every phase boundary already is.
func apply(ctx context.Context, nft knftables.Interface, run txRunner, ew *nlElemWriter, units []*unit, maxOps int) (applyStats, error) {
	var stats applyStats
	for start := 0; start < len(units); {
		end, ops := start, 0
		for end < len(units) && (end == start || ops+units[end].numOps() <= maxOps) {
			ops += units[end].numOps()
			end++
		}
		if err := commitUnits(ctx, nft, run, ew, units[start:end], &stats); err != nil {
			return stats, err
		}
		start = end
	}
	return stats, nil
}

// commitUnits commits one transaction's units: through run, or split into
// netlink element batches and nft transactions when ew is set.
func commitUnits(ctx context.Context, nft knftables.Interface, run txRunner, ew *nlElemWriter, units []*unit, stats *applyStats) error {
	for len(units) > 0 {
		n := 0
		if ew != nil {
			var err error
			n, err = ew.writeRun(units)
			if err != nil {
				return fmt.Errorf("nftables transaction %d (%d element operations over netlink): %w", stats.transactions+1, opsOf(units[:n]), err)
			}
			if n > 0 {
				stats.netlinkOps += opsOf(units[:n])
			}
		}
		if n == 0 {
			// At least one unit, then up to the next run ew takes, or
			// the first element after objects (nft may be creating its
			// set: ew can tell once these are committed).
			for n = 1; n < len(units) && (ew == nil || !nlBoundary(ew, units[n-1], units[n])); n++ {
			}
			tx := nft.NewTransaction()
			for _, u := range units[:n] {
				u.write(tx)
			}
			if err := run(ctx, tx); err != nil {
				return fmt.Errorf("nftables transaction %d (%d operations): %w", stats.transactions+1, tx.NumOperations(), err)
			}
			if ew != nil {
				ew.nftRan()
			}
		}
		stats.transactions++
		stats.operations += opsOf(units[:n])
		for _, u := range units[:n] {
			u.done()
		}
		units = units[n:]
	}
	return nil
}

func opsOf(units []*unit) int {
	n := 0
	for _, u := range units {
		n += u.numOps()
	}
	return n
}

// nlBoundary reports whether an nft run should end before u (prev is the
// unit before it).
func nlBoundary(ew *nlElemWriter, prev, u *unit) bool {
	return u.els != nil && (prev.els == nil || ew.canWrite(u))
}
