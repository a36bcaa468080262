package knft

import (
	"context"
	"fmt"
	"os/exec"

	"sigs.k8s.io/knftables"
)

// Kernel is the real kernel's Interface for one table: objects through
// nft (runner.go), element runs as netlink batches (nlwrite.go), read-back
// over netlink (nltable.go). Its netlink sockets are opened in the network
// namespace of the calling thread and kept open between calls (conns.go)
// until Close.
type Kernel struct {
	family uint8 // nfgen family
	table  string
	// nft lists the sets the netlink decoder cannot spell and deletes the
	// table; run commits transactions (nftRunner).
	nft   knftables.Interface
	run   func(context.Context, *knftables.Transaction) error
	conns connPool
}

// New returns the Kernel Interface for table in family (ip or ip6); it
// needs the nft binary.
func New(family knftables.Family, table string) (*Kernel, error) {
	nft, err := knftables.New(family, table)
	if err != nil {
		return nil, fmt.Errorf("nftables %s: %w", family, err)
	}
	path, err := exec.LookPath("nft")
	if err != nil {
		return nil, fmt.Errorf("nftables %s: %w", family, err)
	}
	return &Kernel{family: nfproto(family), table: table, nft: timeoutNFT{nft}, run: nftRunner(path)}, nil
}

// Exists is part of Interface.
func (k *Kernel) Exists(context.Context) (bool, error) {
	c, err := k.conns.get()
	if err != nil {
		return false, err
	}
	defer k.conns.put(c)
	return k.tableExists(c)
}

// Apply is part of Interface.
func (k *Kernel) Apply(ctx context.Context, txs [][]*Unit) (Stats, error) {
	if len(txs) == 0 {
		return Stats{}, nil // no sockets to open
	}
	ew, err := newElemWriter(&k.conns, k.family, k.table)
	if err != nil {
		return Stats{}, err
	}
	defer ew.close()
	c := &committer{ctx: ctx, nft: k.nft, run: k.run, ew: ew}
	return c.apply(txs)
}

// Close is part of Interface: it closes the sockets kept between calls.
func (k *Kernel) Close() { k.conns.close() }

// Delete is part of Interface.
func (k *Kernel) Delete(ctx context.Context) error { return deleteTable(ctx, k.nft) }

func deleteTable(ctx context.Context, nft knftables.Interface) error {
	tx := nft.NewTransaction()
	tx.Delete(&knftables.Table{})
	if err := nft.Run(ctx, tx); err != nil && !knftables.IsNotFound(err) {
		return fmt.Errorf("deleting table: %w", err)
	}
	return nil
}
