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
// step of the same sequence, which every phase boundary already is. The
// next batch is encoded while the last one is in the kernel.
//
// The cleanup units at the end (stale chains and sets: nothing refers to
// them once the rest committed) go in transactions of their own; their
// failure is returned as a *cleanupError, as upstream's separate cleanup
// transaction: everything the State asks for is programmed by then.
func apply(ctx context.Context, nft knftables.Interface, run txRunner, ew *nlElemWriter, units []*unit, maxOps int) (applyStats, error) {
	c := &committer{ctx: ctx, nft: nft, run: run, ew: ew}
	first := len(units)
	for first > 0 && units[first-1].phase >= phaseChainFlush {
		first--
	}
	if err := c.commitAll(units[:first], maxOps); err != nil {
		return c.stats, err
	}
	if err := c.settle(); err != nil {
		return c.stats, err
	}
	if err := c.commitAll(units[first:], maxOps); err != nil {
		return c.stats, &cleanupError{err}
	}
	return c.stats, c.settle()
}

// cleanupError is a failure to delete stale chains or sets, after the rest
// of a sync committed.
type cleanupError struct{ err error }

func (e *cleanupError) Error() string { return "cleaning up stale objects: " + e.err.Error() }
func (e *cleanupError) Unwrap() error { return e.err }

// commitAll commits units packed into transactions of at most maxOps
// operations (a unit is never split).
func (c *committer) commitAll(units []*unit, maxOps int) error {
	for start := 0; start < len(units); {
		end, ops := start, 0
		for end < len(units) && (end == start || ops+units[end].numOps() <= maxOps) {
			ops += units[end].numOps()
			end++
		}
		if err := c.commitUnits(units[start:end]); err != nil {
			return err
		}
		start = end
	}
	return nil
}

// committer commits one sync's units.
type committer struct {
	ctx   context.Context
	nft   knftables.Interface
	run   txRunner
	ew    *nlElemWriter
	stats applyStats
	// inFlight are the units of the netlink batch ew has in flight.
	inFlight []*unit
}

// commitUnits commits one transaction's units: through run, or split into
// netlink element batches and nft transactions when ew is set.
func (c *committer) commitUnits(units []*unit) error {
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
		// first element after objects (nft may be creating its set: ew
		// can tell once these are committed).
		n := 1
		for n < len(units) && (c.ew == nil || !nlBoundary(c.ew, units[n-1], units[n])) {
			n++
		}
		tx := c.nft.NewTransaction()
		for _, u := range units[:n] {
			u.write(tx)
		}
		if err := c.run(c.ctx, tx); err != nil {
			return fmt.Errorf("nftables transaction %d (%d operations): %w", c.stats.transactions+1, tx.NumOperations(), err)
		}
		if c.ew != nil {
			c.ew.nftRan()
		}
		c.committed(units[:n], false)
		units = units[n:]
	}
	return nil
}

// settle waits for the netlink batch in flight, if any, and records it.
func (c *committer) settle() error {
	units := c.inFlight
	if units == nil {
		return nil
	}
	c.inFlight = nil
	if err := c.ew.wait(); err != nil {
		return fmt.Errorf("nftables transaction %d (%d element operations over netlink): %w", c.stats.transactions+1, opsOf(units), err)
	}
	c.committed(units, true)
	return nil
}

// committed updates the store for units the kernel took.
func (c *committer) committed(units []*unit, netlink bool) {
	ops := opsOf(units)
	c.stats.transactions++
	c.stats.operations += ops
	if netlink {
		c.stats.netlinkOps += ops
	}
	for _, u := range units {
		u.done()
	}
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
