package nftables

import (
	"context"

	"github.com/svcproxy/svcproxy/pkg/knft"
)

// defaultMaxOps bounds one transaction. The kernel holds the nfnetlink
// mutex for a whole transaction and nft parses all of it at once, so a
// cold start is split rather than sent as one giant batch.
const defaultMaxOps = 10000

// apply sends units in order, packed into transactions of at most maxOps
// operations (a unit is never split). After each committed transaction the
// kernel side of the store is updated (the units' Done), so a failure
// part-way leaves the store true to the kernel.
//
// The cleanup units at the end (stale chains and sets: nothing refers to
// them once the rest committed) go in transactions of their own; their
// failure is returned as a *cleanupError, as upstream's separate cleanup
// transaction: everything the State asks for is programmed by then.
func apply(ctx context.Context, k knft.Interface, units []*unit, maxOps int) (knft.Stats, error) {
	first := len(units)
	for first > 0 && units[first-1].phase >= phaseChainFlush {
		first--
	}
	stats, err := k.Apply(ctx, pack(units[:first], maxOps))
	if err != nil {
		return stats, err
	}
	more, err := k.Apply(ctx, pack(units[first:], maxOps))
	stats.Transactions += more.Transactions
	stats.Operations += more.Operations
	stats.NetlinkOps += more.NetlinkOps
	if err != nil {
		return stats, &cleanupError{err}
	}
	return stats, nil
}

// pack groups units into transactions of at most maxOps operations.
func pack(units []*unit, maxOps int) [][]*knft.Unit {
	var txs [][]*knft.Unit
	for start := 0; start < len(units); {
		end, ops := start, 0
		var tx []*knft.Unit
		for end < len(units) && (end == start || ops+units[end].numOps() <= maxOps) {
			ops += units[end].numOps()
			tx = append(tx, units[end].kernelUnit())
			end++
		}
		txs = append(txs, tx)
		start = end
	}
	return txs
}

// cleanupError is a failure to delete stale chains or sets, after the rest
// of a sync committed.
type cleanupError struct{ err error }

func (e *cleanupError) Error() string { return "cleaning up stale objects: " + e.err.Error() }
func (e *cleanupError) Unwrap() error { return e.err }
