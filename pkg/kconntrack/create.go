package kconntrack

import (
	"context"
	"errors"
	"fmt"
	"time"

	"golang.org/x/sys/unix"

	"github.com/svcproxy/svcproxy/pkg/knetlink"
	"github.com/svcproxy/svcproxy/pkg/proxy"
)

const (
	msgNew     = 0 // IPCTNL_MSG_CT_NEW
	ctaTimeout = 7
	// confirmed, seen reply and assured: what a flow that has seen both
	// directions looks like (Flow.Replied is not consulted).
	createdStatus = statusSeenReply | 1<<2 | 1<<3
)

// Create inserts flows, untranslated, that expire after timeout. It is
// not part of Interface: tests and benchmarks use it to fill a namespace's
// table quickly, in batches like Delete (the proxy creates flows only
// with their translation, CreateNAT).
func (c *Client) Create(ctx context.Context, family proxy.IPFamily, flows []Flow, timeout time.Duration) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.fd < 0 {
		return 0, errors.New("conntrack client closed")
	}
	created := 0
	var msg []byte
	for len(flows) > 0 {
		if err := ctx.Err(); err != nil {
			return created, err
		}
		n := min(c.batchSize(), len(flows))
		msg = msg[:0]
		first := c.seq + 1
		for _, f := range flows[:n] {
			c.seq++
			msg = appendCreate(msg, f, c.seq, inetFamily(family), timeout)
		}
		flows = flows[n:]
		ok, bad, err := c.exchange(msg, first, n, func(e unix.Errno) bool { return e == 0 })
		created += ok
		if err != nil {
			c.resetLocked()
			return created, fmt.Errorf("conntrack create: %w", err)
		}
		if bad > 0 {
			return created, fmt.Errorf("conntrack create: kernel refused %d flows", bad)
		}
	}
	return created, nil
}

func appendCreate(b []byte, f Flow, seq uint32, family uint8, timeout time.Duration) []byte {
	start := len(b)
	b = appendRequest(b, msgNew, unix.NLM_F_REQUEST|unix.NLM_F_ACK|unix.NLM_F_CREATE|unix.NLM_F_EXCL, seq, family)
	b = appendTuple(b, ctaTupleOrig, f.Orig, f.Proto, family)
	b = appendTuple(b, ctaTupleReply, f.Reply, f.Proto, family)
	b = knetlink.AppendAttr(b, ctaTimeout, be32(uint32(timeout/time.Second)))
	b = knetlink.AppendAttr(b, ctaStatus, be32(createdStatus))
	if f.Zone != 0 {
		b = knetlink.AppendAttr(b, ctaZone, be16(f.Zone))
	}
	knetlink.SetLen(b, start)
	return b
}

func be32(v uint32) []byte { return []byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)} }
