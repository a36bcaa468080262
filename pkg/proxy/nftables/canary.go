package nftables

import (
	"context"
	"fmt"
)

// CanaryMissing reports whether this family's table has disappeared since
// it was programmed: deleted by an admin, a firewall reload or another tool.
// The app polls it every syncPeriod and asks for a full sync when it fires.
// Between syncs the Proxier trusts what it committed, so without this a
// deleted table would come back only with the hourly full sync.
//
// It may run concurrently with Sync: it only reads the kernel and raises a
// flag that the next Sync consumes by reading the kernel again.
func (p *Proxier) CanaryMissing(ctx context.Context) (bool, error) {
	if !p.programmed.Load() {
		return false, nil
	}
	present, err := p.tableExists(ctx)
	if err != nil {
		return false, fmt.Errorf("checking table %s: %w", TableName, err)
	}
	if !present {
		p.tableLost.Store(true)
	}
	return !present, nil
}

// tableExists asks the kernel for the table alone.
func (p *Proxier) tableExists(ctx context.Context) (bool, error) { return p.kernel.Exists(ctx) }
