package kconntrack

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"time"

	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/svcproxy/svcproxy/pkg/knetlink"
	"github.com/svcproxy/svcproxy/pkg/proxy"
)

// ctnetlink message types (linux/netfilter/nfnetlink_conntrack.h).
const (
	subsysCtnetlink = 1 // NFNL_SUBSYS_CTNETLINK
	msgGet          = 1 // IPCTNL_MSG_CT_GET
	msgDelete       = 2 // IPCTNL_MSG_CT_DELETE
	nlmFDumpIntr    = 0x10
)

// Defaults for Client.
const (
	// DefaultBatchSize is how many delete requests go to the kernel in one
	// sendmsg; their acks (≤ ~150 bytes each) must fit the receive buffer.
	DefaultBatchSize = 512
	recvBufferSize   = 1 << 20
	bufferSize       = 256 << 10
	ioTimeout        = 10 * time.Second
)

// Client talks ctnetlink on one socket, opened in the network namespace
// the client was made for; it is safe for concurrent use (calls serialize).
type Client struct {
	// BatchSize is how many deletes go out in one sendmsg.
	BatchSize int

	mu   sync.Mutex
	open func() (int, error) // opens a socket in the client's namespace
	fd   int
	seq  uint32
	buf  []byte
}

// New opens a client in the calling thread's network namespace.
func New() (*Client, error) { return newClient(openSocket) }

// NewAt opens a client whose socket lives in ns; it may then be used from
// any thread (a netlink socket keeps the namespace it was created in). ns
// must stay open while the client is used.
func NewAt(ns netns.NsHandle) (*Client, error) {
	return newClient(func() (int, error) { return openSocketIn(ns) })
}

func newClient(open func() (int, error)) (*Client, error) {
	fd, err := open()
	if err != nil {
		return nil, err
	}
	return &Client{BatchSize: DefaultBatchSize, open: open, fd: fd, buf: make([]byte, bufferSize)}, nil
}

func openSocketIn(ns netns.NsHandle) (int, error) {
	type result struct {
		fd  int
		err error
	}
	done := make(chan result, 1)
	go func() {
		// The thread enters ns and is never unlocked, so it dies with this
		// goroutine instead of going back to the scheduler in the wrong
		// namespace.
		runtime.LockOSThread()
		if err := netns.Set(ns); err != nil {
			done <- result{-1, fmt.Errorf("enter netns: %w", err)}
			return
		}
		fd, err := openSocket()
		done <- result{fd, err}
	}()
	r := <-done
	return r.fd, r.err
}

func openSocket() (int, error) {
	fd, err := knetlink.OpenNetfilter()
	if err != nil {
		return -1, err
	}
	// A bigger buffer holds the acks of a whole delete batch. FORCE needs
	// CAP_NET_ADMIN, which the daemon has; the plain option is the fallback.
	if unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, recvBufferSize) != nil {
		_ = unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUF, recvBufferSize)
	}
	// Report only the header of failed requests in error acks.
	_ = unix.SetsockoptInt(fd, unix.SOL_NETLINK, unix.NETLINK_CAP_ACK, 1)
	tv := unix.NsecToTimeval(ioTimeout.Nanoseconds())
	if err := unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv); err != nil {
		unix.Close(fd)
		return -1, fmt.Errorf("netlink receive timeout: %w", err)
	}
	return fd, nil
}

// Close releases the socket.
func (c *Client) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.fd < 0 {
		return nil
	}
	err := unix.Close(c.fd)
	c.fd = -1
	return err
}

func inetFamily(f proxy.IPFamily) uint8 {
	if f == proxy.IPv6 {
		return unix.AF_INET6
	}
	return unix.AF_INET
}

// List is part of Interface. Flows are parsed straight out of the receive
// buffer, so memory stays at one buffer however big the table is.
func (c *Client) List(ctx context.Context, family proxy.IPFamily, visit func(Flow)) error {
	return c.list(ctx, family, nil, visit)
}

// ListDNATed is List of the flows whose destination the kernel's NAT
// translates (the dst-nat status bit): the kernel filters the dump, so a
// big table with few such flows costs a walk in the kernel rather than
// every flow parsed here. A kernel too old to filter dumps by status
// ignores the filter and sends every flow: the caller that needs exactly
// these still checks each (Flow.DNATed).
func (c *Client) ListDNATed(ctx context.Context, family proxy.IPFamily, visit func(Flow)) error {
	return c.list(ctx, family, dnatFilter, visit)
}

// dnatFilter asks a dump for the flows with IPS_DST_NAT set
// (CTA_STATUS, CTA_STATUS_MASK).
var dnatFilter = func() []byte {
	const ctaStatusMask, statusDstNAT = 26, 1 << 5
	b := knetlink.AppendAttr(nil, ctaStatus, be32(statusDstNAT))
	return knetlink.AppendAttr(b, ctaStatusMask, be32(statusDstNAT))
}()

// list dumps family's flows, with filter's attributes in the request.
func (c *Client) list(ctx context.Context, family proxy.IPFamily, filter []byte, visit func(Flow)) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.fd < 0 {
		return errors.New("conntrack client closed")
	}
	c.seq++
	seq := c.seq
	req := appendRequest(nil, msgGet, unix.NLM_F_REQUEST|unix.NLM_F_DUMP, seq, inetFamily(family))
	if len(filter) > 0 {
		req = append(req, filter...)
		knetlink.SetLen(req, 0)
	}
	if err := knetlink.Send(c.fd, req); err != nil {
		return fmt.Errorf("conntrack dump request: %w", err)
	}
	interrupted := false
	for {
		if err := ctx.Err(); err != nil {
			// Drain nothing: the socket is reset by closing it, so a half-read
			// dump cannot confuse the next call.
			c.resetLocked()
			return err
		}
		n, err := c.recv()
		if err != nil {
			c.resetLocked()
			return fmt.Errorf("conntrack dump: %w", err)
		}
		done, intr, err := parseDump(c.buf[:n], seq, family, visit)
		interrupted = interrupted || intr
		if err != nil {
			c.resetLocked()
			return fmt.Errorf("conntrack dump: %w", err)
		}
		if done {
			break
		}
	}
	if interrupted {
		return ErrInterrupted
	}
	return nil
}

func (c *Client) recv() (int, error) { return knetlink.Receive(c.fd, c.buf) }

// resetLocked replaces the socket after an aborted exchange, so that stale
// replies left in the old one never reach the next request.
func (c *Client) resetLocked() {
	unix.Close(c.fd)
	fd, err := c.open()
	if err != nil {
		c.fd = -1
		return
	}
	c.fd = fd
}
