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
}

// apply runs units in order, packed into transactions of at most maxOps
// operations (a unit is never split). After each committed transaction the
// kernel side of the store is updated, so a failure part-way leaves the
// store true to the kernel.
func apply(ctx context.Context, nft knftables.Interface, run txRunner, units []*unit, maxOps int) (applyStats, error) {
	var stats applyStats
	for start := 0; start < len(units); {
		tx := nft.NewTransaction()
		end := start
		for end < len(units) && (end == start || tx.NumOperations()+units[end].numOps() <= maxOps) {
			units[end].write(tx)
			end++
		}
		if err := run(ctx, tx); err != nil {
			return stats, fmt.Errorf("nftables transaction %d (%d operations): %w", stats.transactions+1, tx.NumOperations(), err)
		}
		stats.transactions++
		stats.operations += tx.NumOperations()
		for _, u := range units[start:end] {
			u.done()
		}
		start = end
	}
	return stats, nil
}
