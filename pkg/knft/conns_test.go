package knft

import (
	"encoding/binary"
	"errors"
	"math"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/svcproxy/svcproxy/pkg/knetlink"
)

// The kernel's side of a batch's reports, played over a datagram
// socketpair: what verdict reads from a socket that stays open for the
// next batch. (The real kernel's part is in kernel_test.go.)

// reportPair returns a socket as a batch's sender sees it and the end the
// test writes the kernel's reports into; both are closed after the test.
func reportPair(t *testing.T) (*nlConn, int) {
	t.Helper()
	c, kernel := unclosedPair(t)
	t.Cleanup(func() { unix.Close(c.fd) })
	return c, kernel
}

// unclosedPair is reportPair whose first socket the caller closes (a
// pool under test may have closed it already).
func unclosedPair(t *testing.T) (*nlConn, int) {
	t.Helper()
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(fds[1]) })
	tv := unix.Timeval{Sec: 1} // a report the code waits for in vain fails the test, not hangs it
	if err := unix.SetsockoptTimeval(fds[0], unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv); err != nil {
		t.Fatal(err)
	}
	c := &nlConn{fd: fds[0]}
	c.takeBuf()
	return c, fds[1]
}

// report writes one NLMSG_ERROR for seq (errno 0: an ack), as the kernel
// queues it: a datagram of its own, with only the header of the message
// it answers (NETLINK_CAP_ACK).
func report(t *testing.T, fd int, seq uint32, errno syscall.Errno) {
	t.Helper()
	b := knetlink.AppendHeader(nil, unix.NLMSG_ERROR, 0, seq, 0, 0)[:unix.NLMSG_HDRLEN]
	b = binary.NativeEndian.AppendUint32(b, uint32(-int32(errno)))
	b = append(b, make([]byte, unix.NLMSG_HDRLEN)...) // the header answered
	knetlink.SetLen(b, 0)
	if _, err := unix.Write(fd, b); err != nil {
		t.Fatal(err)
	}
}

// queued reports whether a datagram waits on c.
func queued(t *testing.T, c *nlConn) bool {
	t.Helper()
	_, _, _, _, err := unix.Recvmsg(c.fd, c.buf, nil, unix.MSG_DONTWAIT|unix.MSG_PEEK)
	if errors.Is(err, unix.EAGAIN) {
		return false
	}
	if err != nil {
		t.Fatal(err)
	}
	return true
}

func batchOf(begin, last uint32) *nlBatch {
	return &nlBatch{beginSeq: begin, lastSeq: last, msgs: []batchMsg{
		{seq: begin + 1, what: "deleting elements from s"},
		{seq: last, what: "adding elements to s"},
	}}
}

// A failed commit is reported on the batch's begin, before the reports
// of its messages: the verdict needs the first, and the rest must not be
// left for the next batch on the same socket.
func TestVerdictDrainsAfterFailedCommit(t *testing.T) {
	c, kernel := reportPair(t)
	report(t, kernel, 10, unix.ENOMEM)
	report(t, kernel, 11, unix.ENOENT)
	report(t, kernel, 12, 0)
	err := verdict(c, batchOf(10, 12))
	if !errors.Is(err, unix.ENOMEM) {
		t.Fatalf("verdict = %v, want the commit's ENOMEM", err)
	}
	if c.broken {
		t.Fatal("a rejected batch broke the socket")
	}
	if queued(t, c) {
		t.Fatal("reports of the rejected batch are left on the socket")
	}
	report(t, kernel, 15, 0)
	if err := verdict(c, batchOf(13, 15)); err != nil {
		t.Fatalf("the next batch on the same socket: %v", err)
	}
}

// A message's rejection names it; the reports after it (the last
// message's ack) are read or dropped with it.
func TestVerdictNamesRejectedMessage(t *testing.T) {
	c, kernel := reportPair(t)
	report(t, kernel, 21, unix.ENOENT)
	report(t, kernel, 22, 0)
	err := verdict(c, batchOf(20, 22))
	if !errors.Is(err, unix.ENOENT) || err.Error() != "netlink batch, deleting elements from s: no such file or directory" {
		t.Fatalf("verdict = %v", err)
	}
	if c.broken || queued(t, c) {
		t.Fatalf("broken %v, queued %v: want a clean socket", c.broken, queued(t, c))
	}
}

// Reports that are not the batch's are skipped by sequence number, also
// when the batch's numbers wrap around.
func TestVerdictAcrossSequenceWrap(t *testing.T) {
	c, kernel := reportPair(t)
	b := batchOf(math.MaxUint32-1, 1) // begin, MaxUint32 (a delete), 0, 1 (the last)
	b.msgs[0].seq = math.MaxUint32
	report(t, kernel, 5, unix.EEXIST)             // not this batch's
	report(t, kernel, math.MaxUint32-3, unix.EIO) // nor this
	report(t, kernel, math.MaxUint32, unix.ENOENT)
	report(t, kernel, 1, 0)
	err := verdict(c, b)
	if !errors.Is(err, unix.ENOENT) {
		t.Fatalf("verdict = %v, want the delete's ENOENT", err)
	}
	if !b.has(0) || !b.has(math.MaxUint32-1) || b.has(2) || b.has(math.MaxUint32-2) {
		t.Fatal("has() wrong across the wrap")
	}
}

// A socket whose reply was not read to its end is broken: a timeout
// (the reply may still come) or a malformed message.
func TestVerdictBreaksSocket(t *testing.T) {
	t.Run("timeout", func(t *testing.T) {
		c, _ := reportPair(t)
		tv := unix.Timeval{Usec: 10_000}
		if err := unix.SetsockoptTimeval(c.fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv); err != nil {
			t.Fatal(err)
		}
		if err := verdict(c, batchOf(1, 3)); err == nil || !c.broken {
			t.Fatalf("verdict = %v, broken %v: want an error and a broken socket", err, c.broken)
		}
	})
	t.Run("malformed", func(t *testing.T) {
		c, kernel := reportPair(t)
		b := knetlink.AppendHeader(nil, unix.NLMSG_ERROR, 0, 3, 0, 0)
		knetlink.SetLen(b, 0)
		b[0] += 64 // longer than the datagram
		if _, err := unix.Write(kernel, b); err != nil {
			t.Fatal(err)
		}
		if err := verdict(c, batchOf(1, 3)); !errors.Is(err, knetlink.ErrMalformed) || !c.broken {
			t.Fatalf("verdict = %v, broken %v: want ErrMalformed and a broken socket", err, c.broken)
		}
	})
}

// A dump that stopped part-way (the socket's dump is still open in the
// kernel) breaks the socket; a reply that ended, with the kernel's error
// or not, does not.
func TestRequestEndsOrBreaks(t *testing.T) {
	c := &nlConn{seq: 7}
	done := knetlink.AppendHeader(nil, unix.NLMSG_DONE, 0, 7, 0, 0)
	knetlink.SetLen(done, 0)
	if end, err := c.parse(done, nil); !end || err != nil || c.broken {
		t.Fatalf("NLMSG_DONE: end %v, err %v, broken %v", end, err, c.broken)
	}
	msg := knetlink.AppendHeader(nil, unix.NFNL_SUBSYS_NFTABLES<<8|unix.NFT_MSG_NEWSET, 0, 7, 0, 0)
	knetlink.SetLen(msg, 0)
	stop := errors.New("stop")
	if end, err := c.parse(msg, func([]byte) error { return stop }); !end || !errors.Is(err, stop) || !c.broken {
		t.Fatalf("stopped mid-reply: end %v, err %v, broken %v", end, err, c.broken)
	}
}

// The pool hands back the socket it was given, and closes the ones it must
// not keep.
func TestConnPoolKeeps(t *testing.T) {
	ns, err := threadNetns()
	if err != nil {
		t.Fatal(err)
	}
	fresh := func() *nlConn {
		c, _ := unclosedPair(t)
		c.netns = ns
		return c
	}
	p := &connPool{netns: ns}
	kept := fresh()
	p.put(kept)
	if kept.buf != nil {
		t.Fatal("an idle socket holds its receive buffer")
	}
	if c, err := p.get(); err != nil || c != kept || c.buf == nil {
		t.Fatalf("get = %p, %v; want the kept socket %p with a buffer", c, err, kept)
	}
	kept.close()
	broken := fresh()
	broken.broken = true
	elsewhere := fresh()
	elsewhere.netns.ino++
	unknown := fresh() // opened where /proc could not tell the namespace
	unknown.netns = netnsID{}
	for _, c := range []*nlConn{broken, elsewhere, unknown} {
		p.put(c)
		if isOpen(c.fd) {
			t.Errorf("put kept a socket it must close (broken %v, netns %v)", c.broken, c.netns)
		}
	}
	idle := fresh()
	p.put(idle)
	p.close()
	if isOpen(idle.fd) {
		t.Error("close left an idle socket open")
	}
	after := fresh()
	p.put(after)
	if isOpen(after.fd) {
		t.Error("a closed pool kept a socket")
	}
}

func isOpen(fd int) bool {
	_, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0)
	return err == nil
}
