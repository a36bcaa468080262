package nftables

import (
	"context"
	"fmt"
)

// CanaryMissing is part of syncer.Proxier: it reports whether this family's
// table has disappeared since it was programmed (deleted by an admin, a
// firewall reload or another tool). The syncer polls it every syncPeriod
// and answers true with a RecoverySync, which reads the kernel again and
// recreates the table.
//
// It may run concurrently with Sync: it only reads the kernel.
func (p *Proxier) CanaryMissing(ctx context.Context) (bool, error) {
	if !p.programmed.Load() {
		return false, nil
	}
	present, err := p.tableExists(ctx)
	if err != nil {
		return false, fmt.Errorf("checking table %s: %w", TableName, err)
	}
	return !present, nil
}

// tableExists asks the kernel for the table alone.
func (p *Proxier) tableExists(ctx context.Context) (bool, error) { return p.kernel.Exists(ctx) }
