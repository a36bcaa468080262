package nftables

import (
	"context"
	"errors"
	"fmt"

	"golang.org/x/sys/unix"
	"sigs.k8s.io/knftables"
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

// tableExists asks the kernel for the table alone (netlink), or the fake.
func (p *Proxier) tableExists(ctx context.Context) (bool, error) {
	if p.nlFamily == 0 {
		_, err := p.nft.List(ctx, "chains")
		if knftables.IsNotFound(err) {
			return false, nil
		}
		return err == nil, err
	}
	c, err := dialNetfilter()
	if err != nil {
		return false, err
	}
	defer c.close()
	err = c.request(unix.NFT_MSG_GETTABLE, p.nlFamily, false, attrString(unix.NFTA_TABLE_NAME, TableName),
		func([]byte) error { return nil })
	if errors.Is(err, unix.ENOENT) {
		return false, nil
	}
	return err == nil, err
}
