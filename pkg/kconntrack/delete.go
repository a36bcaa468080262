package kconntrack

import (
	"context"
	"errors"
	"fmt"

	"golang.org/x/sys/unix"

	"github.com/svcproxy/svcproxy/pkg/knetlink"
	"github.com/svcproxy/svcproxy/pkg/proxy"
)

// Delete is part of Interface. Requests go out BatchSize at a time in one
// sendmsg each, and the batch's acks are read before the next one, so a
// syscall pair serves hundreds of flows instead of one.
func (c *Client) Delete(ctx context.Context, family proxy.IPFamily, flows []Flow) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.fd < 0 {
		return 0, errors.New("conntrack client closed")
	}
	batch := c.batchSize()
	gone, failed := 0, 0
	var firstErr error
	var msg []byte
	for len(flows) > 0 {
		if err := ctx.Err(); err != nil {
			return gone, err
		}
		n := min(batch, len(flows))
		msg = msg[:0]
		first := c.seq + 1
		for _, f := range flows[:n] {
			c.seq++
			msg = appendDelete(msg, f, c.seq, inetFamily(family))
		}
		flows = flows[n:]
		ok, bad, err := c.exchange(msg, first, n, goneOK)
		gone += ok
		failed += bad
		if err != nil {
			c.resetLocked()
			return gone, fmt.Errorf("conntrack delete: %w", err)
		}
		if bad > 0 && firstErr == nil {
			firstErr = fmt.Errorf("conntrack delete refused by the kernel")
		}
	}
	if failed > 0 {
		return gone, fmt.Errorf("%w (%d flows)", firstErr, failed)
	}
	return gone, nil
}

// goneOK accepts the acks of a delete: success and ENOENT (the flow expired
// meanwhile) both mean the flow is gone.
func goneOK(e unix.Errno) bool { return e == 0 || e == unix.ENOENT }

// exchange sends one batch of n requests numbered from first and counts
// their acks as accepted by ok or not.
func (c *Client) exchange(msg []byte, first uint32, n int, ok func(unix.Errno) bool) (gone, failed int, err error) {
	err = c.exchangeEach(msg, first, n, func(_ int, e unix.Errno) {
		if ok(e) {
			gone++
		} else {
			failed++
		}
	})
	return gone, failed, err
}

// exchangeEach sends one batch of n requests numbered from first and
// calls ack with each one's index in the batch and the kernel's answer.
func (c *Client) exchangeEach(msg []byte, first uint32, n int, ack func(i int, e unix.Errno)) error {
	if err := knetlink.Send(c.fd, msg); err != nil {
		return err
	}
	last := first + uint32(n) - 1
	for acked := 0; acked < n; {
		size, err := c.recv()
		if err != nil {
			return err
		}
		err = knetlink.Messages(c.buf[:size], func(typ, _ uint16, seq uint32, body []byte) error {
			if typ != unix.NLMSG_ERROR || seq < first || seq > last {
				return nil
			}
			acked++
			ack(int(seq-first), knetlink.AckErrno(body))
			return nil
		})
		if err != nil {
			return err
		}
	}
	return nil
}

func (c *Client) batchSize() int {
	if c.BatchSize <= 0 {
		return DefaultBatchSize
	}
	return c.BatchSize
}
