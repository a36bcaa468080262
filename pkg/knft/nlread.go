package knft

import (
	"errors"
	"fmt"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/svcproxy/svcproxy/pkg/knetlink"
)

// Read-back over netlink. Listing the table through nft means `nft --json
// list table` (every rule and every element) per knftables List call, then
// decoding the JSON: 65 s for a restart at 10k services × 10 endpoints. The
// kernel dumps the same objects in binary in a fraction of that, so the
// read-back lists chains, rule comments, sets and elements with plain
// netlink dumps (only a few attributes are needed).

// nlConn is a NETLINK_NETFILTER socket in the network namespace of the
// thread that opened it.
type nlConn struct {
	fd    int
	seq   uint32
	buf   []byte  // the receive buffer, while the socket is in use
	netns netnsID // where it was opened (connPool)
	// broken: a reply was not read to its end (a receive error or
	// timeout, a malformed or undecodable message): messages of it may
	// still arrive, or a dump may still be open, so the socket is not
	// used again.
	broken bool
	sndbuf int // the send buffer asked for (growSndbuf)
}

// recvBufs holds the receive buffers of sockets not in use. A socket may
// stay open for the Kernel's life but needs its 64 KiB only during a call;
// with a fresh buffer per socket and call, the buffers were 133 of the
// 133 KB an incremental sync allocated here.
var recvBufs = sync.Pool{New: func() any {
	// The kernel fills one dump message of at most 32 KiB per read.
	b := make([]byte, 64<<10)
	return &b
}}

// dialNetfilter opens a socket, with a receive buffer, in the calling
// thread's network namespace.
func dialNetfilter() (*nlConn, error) {
	fd, err := knetlink.OpenNetfilter()
	if err != nil {
		return nil, err
	}
	c := &nlConn{fd: fd}
	c.takeBuf()
	return c, nil
}

func (c *nlConn) takeBuf() { c.buf = *recvBufs.Get().(*[]byte) }

// releaseBuf hands the receive buffer back: nothing read into it may be
// used afterwards.
func (c *nlConn) releaseBuf() {
	if buf := c.buf; buf != nil {
		c.buf = nil
		recvBufs.Put(&buf)
	}
}

// close closes the socket and releases its buffer.
func (c *nlConn) close() {
	unix.Close(c.fd)
	c.releaseBuf()
}

// request sends one nf_tables request (a dump when dump is set, else a get
// with an acknowledgement) and calls each with the attributes of every
// reply message, which alias the receive buffer.
func (c *nlConn) request(msg uint16, family uint8, dump bool, attrs []byte, each func(attrs []byte) error) error {
	c.seq++
	flags := uint16(unix.NLM_F_REQUEST | unix.NLM_F_ACK)
	if dump {
		flags = unix.NLM_F_REQUEST | unix.NLM_F_DUMP
	}
	req := knetlink.AppendHeader(make([]byte, 0, knetlink.HdrLen+len(attrs)), unix.NFNL_SUBSYS_NFTABLES<<8|msg, flags, c.seq, family, 0)
	req = append(req, attrs...)
	knetlink.SetLen(req, 0)
	if err := knetlink.Send(c.fd, req); err != nil {
		c.broken = true
		return fmt.Errorf("netlink send: %w", err)
	}
	for {
		n, err := knetlink.Receive(c.fd, c.buf)
		if err != nil {
			c.broken = true
			return fmt.Errorf("netlink receive: %w", err)
		}
		done, err := c.parse(c.buf[:n], each)
		if done || err != nil {
			return err
		}
	}
}

// parse handles the messages of one read; done reports the end of the
// reply (NLMSG_DONE, or an error message, which is also the ack). Any
// other error leaves the reply unread (a dump open in the kernel): the
// socket is broken.
func (c *nlConn) parse(b []byte, each func([]byte) error) (done bool, err error) {
	var end error // what ended the reply
	err = knetlink.Messages(b, func(typ, _ uint16, seq uint32, body []byte) error {
		if seq != c.seq {
			return nil // a late reply to an earlier request
		}
		if end = knetlink.ReplyEnd(typ, body); end != nil {
			return end
		}
		if len(body) < 4 {
			return knetlink.ErrMalformed
		}
		return each(body[4:])
	})
	switch {
	case errors.Is(end, knetlink.ErrEnd):
		return true, nil
	case end != nil:
		return true, end // the kernel's errno
	case err != nil:
		c.broken = true
		return true, err
	}
	return false, nil
}

func beUint32(b []byte) uint32 {
	if len(b) < 4 {
		return 0
	}
	return uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3])
}
