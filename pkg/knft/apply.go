package knft

import (
	"context"
	"fmt"

	"sigs.k8s.io/knftables"
)

// elemWriter commits runs of element units as batches of their own: the
// netlink writer (nlwrite.go), or the Fake's stand-in.
type elemWriter interface {
	// canWrite reports whether u is an element run the writer takes.
	canWrite(u *Unit) bool
	// encodeRun encodes, as the next batch, the leading units of us it
	// can, and returns how many those were (0: none, and no batch).
	encodeRun(us []*Unit) int
	// start sends the batch encodeRun made; wait returns the kernel's
	// verdict on it (nil if none is in flight).
	start()
	wait() error
	// nftRan tells the writer that nft ran: sets may have changed.
	nftRan()
}

// committer commits one Apply's transactions: runs of element units that
// ew takes as its batches, everything else through run, in order. A
// transaction may so become several, each a prefix-closed step of the same
// sequence. The next batch is encoded while the last one is in the kernel.
type committer struct {
	ctx   context.Context
	nft   knftables.Interface // makes transactions
	run   func(context.Context, *knftables.Transaction) error
	ew    elemWriter // nil: everything through run
	stats Stats
	// inFlight are the units of the batch ew has in flight.
	inFlight []*Unit
}

func (c *committer) apply(txs [][]*Unit) (Stats, error) {
	for _, units := range txs {
		if err := c.commitUnits(units); err != nil {
			_ = c.settle()
			return c.stats, err
		}
	}
	return c.stats, c.settle()
}

// commitUnits commits one transaction's units.
func (c *committer) commitUnits(units []*Unit) error {
	for len(units) > 0 {
		if c.ew != nil {
			if n := c.ew.encodeRun(units); n > 0 {
				if err := c.settle(); err != nil {
					return err
				}
				c.ew.start()
				c.inFlight, units = units[:n], units[n:]
				continue
			}
			// nft must see every batch before it committed.
			if err := c.settle(); err != nil {
				return err
			}
		}
		// At least one unit, then up to the next run ew takes, or the
		// first element run after objects (nft may be creating its set:
		// ew can tell once these are committed).
		n := 1
		for n < len(units) && !c.boundary(units[n-1], units[n]) {
			n++
		}
		tx := c.nft.NewTransaction()
		for _, u := range units[:n] {
			if err := u.Write(tx); err != nil {
				return err
			}
		}
		if err := c.run(c.ctx, tx); err != nil {
			return fmt.Errorf("nftables transaction %d (%d operations): %w", c.stats.Transactions+1, tx.NumOperations(), err)
		}
		if c.ew != nil {
			c.ew.nftRan()
		}
		c.committed(units[:n], false)
		units = units[n:]
	}
	return nil
}

// boundary reports whether an nft run should end before u (prev is the
// unit before it).
func (c *committer) boundary(prev, u *Unit) bool {
	return c.ew != nil && u.Elems != nil && (prev.Elems == nil || c.ew.canWrite(u))
}

// settle waits for the batch in flight, if any, and records it.
func (c *committer) settle() error {
	units := c.inFlight
	if units == nil {
		return nil
	}
	c.inFlight = nil
	if err := c.ew.wait(); err != nil {
		return fmt.Errorf("nftables transaction %d (%d element operations over netlink): %w", c.stats.Transactions+1, opsOf(units), err)
	}
	c.committed(units, true)
	return nil
}

// committed records units the kernel took.
func (c *committer) committed(units []*Unit, batch bool) {
	ops := opsOf(units)
	c.stats.Transactions++
	c.stats.Operations += ops
	if batch {
		c.stats.NetlinkOps += ops
	}
	for _, u := range units {
		if u.Done != nil {
			u.Done()
		}
	}
}

func opsOf(units []*Unit) int {
	n := 0
	for _, u := range units {
		n += u.Ops
	}
	return n
}
