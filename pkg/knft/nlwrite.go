package knft

import (
	"errors"
	"fmt"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/svcproxy/svcproxy/pkg/knetlink"
)

// Element changes over netlink. A cold sync at 10k services × 10 endpoints
// is ≈ 330k element operations; through nft, parsing their text cost
// ≈ 1.6 s of user CPU in nft plus our rendering of it. The kernel takes the
// same changes as NFT_MSG_NEWSETELEM / NFT_MSG_DELSETELEM messages inside
// one NFNL_MSG_BATCH_BEGIN … END batch — a transaction, exactly like the
// one nft would send — so runs of element units are encoded here
// (nlencode.go) and everything else still goes through nft.

// maxElemListBytes bounds one message's element list: its length is a
// 16-bit netlink attribute length.
const maxElemListBytes = 48 << 10

// nlElemWriter encodes and commits batches of element changes for one
// family. It lives for one Apply, with two of the Kernel's sockets (which
// belong to the network namespace of the thread that opened them).
//
// A batch is sent from its own goroutine while the next one is encoded:
// the kernel applies a batch inside the sending thread's sendmsg, so on two
// CPUs encoding (≈ a third of a cold sync's element work) overlaps the
// kernel's inserts instead of adding to them. One batch at most is in
// flight, so they still commit in order, each after the last one's ack.
type nlElemWriter struct {
	conns  *connPool
	send   *nlConn // batches; only the goroutine of the batch in flight uses it
	lookup *nlConn // set layouts, asked while a batch is in flight
	family uint8
	table  string
	// layouts caches the kernel's layout per set; a nil value means the
	// set is absent or not encodable. Cleared whenever nft ran, since nft
	// may have deleted or added sets.
	layouts map[string]*layout

	b       nlBatch // the batch being encoded
	open    int     // offset of the open element message, -1 if none
	openSet string
	openDel bool
	listAt  int // offset of the open message's element list
	lastAt  int // offset of the last element message
	scratch []byte

	flight *nlFlight // the batch sent and not yet answered
	spare  nlBatch   // the buffers of the last batch answered, for reuse
}

// nlBatch is one encoded batch: a kernel transaction of element messages.
type nlBatch struct {
	buf      []byte
	msgs     []batchMsg
	beginSeq uint32
	lastSeq  uint32 // of the last element message, the one acked
}

type nlFlight struct {
	batch nlBatch
	done  chan error
}

// batchMsg is one element message of the batch, for error reports.
type batchMsg struct {
	seq  uint32
	what string
}

func newElemWriter(conns *connPool, family uint8, table string) (*nlElemWriter, error) {
	send, err := conns.get()
	if err != nil {
		return nil, err
	}
	lookup, err := conns.get()
	if err != nil {
		conns.put(send)
		return nil, err
	}
	return &nlElemWriter{conns: conns, send: send, lookup: lookup, family: family, table: table, layouts: map[string]*layout{}, open: -1}, nil
}

// close waits for the batch in flight, if any, and hands the sockets back.
func (w *nlElemWriter) close() {
	_ = w.wait()
	w.conns.put(w.send)
	w.conns.put(w.lookup)
}

// nftRan forgets the set layouts: nft may have changed the sets.
func (w *nlElemWriter) nftRan() { clear(w.layouts) }

// layout returns set's layout as the kernel reports it, or nil.
func (w *nlElemWriter) layout(set string) *layout {
	l, ok := w.layouts[set]
	if ok {
		return l
	}
	req := append(knetlink.AppendString(nil, unix.NFTA_SET_TABLE, w.table), knetlink.AppendString(nil, unix.NFTA_SET_NAME, set)...)
	var st nlSet
	err := w.lookup.request(unix.NFT_MSG_GETSET, w.family, false, req, func(b []byte) error {
		var err error
		st, _, err = parseSet(b)
		return err
	})
	if err == nil && st.name == set {
		l, _ = setLayout(st)
	}
	// A failed lookup leaves the set to nft, which reports any real
	// problem with its own error.
	w.layouts[set] = l
	return l
}

// canWrite reports whether u is an element change of a set this writer
// encodes: its elements are data (a unit of spelled elements goes
// through nft, which parses them).
func (w *nlElemWriter) canWrite(u *Unit) bool {
	return u.Elems != nil && u.Objects == nil && u.Layout != nil && w.layout(u.Set) != nil
}

// encodeRun encodes, as the next batch, the leading units of us that it
// can, and returns how many those were (0: the first one is not for
// netlink, and there is no batch). Their order is kept. It may run while
// the previous batch is in flight; start sends it.
func (w *nlElemWriter) encodeRun(us []*Unit) int {
	w.reset()
	n := 0
	for ; n < len(us) && w.canWrite(us[n]); n++ {
		if !w.addRun(us[n]) {
			break // not encodable after all: nft gets it
		}
	}
	if n > 0 {
		w.finish()
	}
	return n
}

func (w *nlElemWriter) reset() {
	w.b.buf, w.b.msgs, w.open = w.b.buf[:0], w.b.msgs[:0], -1
	w.send.seq++
	w.b.beginSeq = w.send.seq
	w.b.buf = knetlink.AppendHeader(w.b.buf, unix.NFNL_MSG_BATCH_BEGIN, unix.NLM_F_REQUEST, w.b.beginSeq, unix.AF_UNSPEC, unix.NFNL_SUBSYS_NFTABLES)
	knetlink.SetLen(w.b.buf, 0)
}

// writerMark is where the batch was before a run, to take the run back.
type writerMark struct {
	buf, msgs, open, listAt, lastAt int
	openSet                         string
	openDel                         bool
	lastSeq                         uint32
}

// addRun encodes a run of element changes, all or none of them, and
// reports whether it did.
func (w *nlElemWriter) addRun(u *Unit) bool {
	m := writerMark{len(w.b.buf), len(w.b.msgs), w.open, w.listAt, w.lastAt, w.openSet, w.openDel, w.b.lastSeq}
	for c := range u.Elems {
		if err := w.add(u, &c); err != nil {
			w.b.buf, w.b.msgs, w.open, w.listAt, w.lastAt = w.b.buf[:m.buf], w.b.msgs[:m.msgs], m.open, m.listAt, m.lastAt
			w.openSet, w.openDel, w.b.lastSeq = m.openSet, m.openDel, m.lastSeq
			return false
		}
	}
	return true
}

// add encodes one element change, or nothing if any part of it fails: a
// delete and the re-add of its key are encoded first, then appended.
func (w *nlElemWriter) add(u *Unit, o *Change) error {
	set := u.Set
	l := w.layouts[set]
	// Both encodings go into scratch, the delete first: a nil base would
	// allocate (and grow) a new slice per element.
	var del, add []byte
	buf := w.scratch[:0]
	var err error
	if o.Del {
		if buf, err = w.encode(buf, l, o, false); err != nil {
			return err
		}
		del = buf
	}
	if o.Add {
		if buf, err = w.encode(buf, l, o, true); err != nil {
			return err
		}
		add = buf[len(del):]
	}
	w.scratch = buf[:0]
	if del != nil {
		w.appendElem(set, true, del)
	}
	if add != nil {
		w.appendElem(set, false, add)
	}
	return nil
}

// encode appends o's element, data, key only unless withValue, to buf.
func (w *nlElemWriter) encode(buf []byte, l *layout, o *Change, withValue bool) ([]byte, error) {
	return l.appendElemData(buf, []byte(o.Key), []byte(o.Value), withValue)
}

// appendElem appends an encoded NFTA_LIST_ELEM to the open message if it
// is for the same set and verb and has room, else to a new message.
func (w *nlElemWriter) appendElem(set string, del bool, elem []byte) {
	if w.open < 0 || w.openSet != set || w.openDel != del || len(w.b.buf)-w.listAt+len(elem) > maxElemListBytes {
		w.closeMsg()
		w.openMsg(set, del)
	}
	w.b.buf = append(w.b.buf, elem...)
}

func (w *nlElemWriter) openMsg(set string, del bool) {
	msg, flags, verb := uint16(unix.NFT_MSG_NEWSETELEM), uint16(unix.NLM_F_REQUEST|unix.NLM_F_CREATE), "adding elements to "
	if del {
		msg, flags, verb = unix.NFT_MSG_DELSETELEM, unix.NLM_F_REQUEST, "deleting elements from "
	}
	w.send.seq++
	b := &w.b
	w.open, w.lastAt, b.lastSeq, w.openSet, w.openDel = len(b.buf), len(b.buf), w.send.seq, set, del
	b.msgs = append(b.msgs, batchMsg{seq: w.send.seq, what: verb + set})
	b.buf = knetlink.AppendHeader(b.buf, unix.NFNL_SUBSYS_NFTABLES<<8|msg, flags, w.send.seq, w.family, 0)
	b.buf = append(b.buf, knetlink.AppendString(nil, unix.NFTA_SET_ELEM_LIST_TABLE, w.table)...)
	b.buf = append(b.buf, knetlink.AppendString(nil, unix.NFTA_SET_ELEM_LIST_SET, set)...)
	w.listAt = len(b.buf)
	b.buf = knetlink.NestStart(b.buf, unix.NFTA_SET_ELEM_LIST_ELEMENTS)
}

// closeMsg fills in the lengths of the open message and its element list.
func (w *nlElemWriter) closeMsg() {
	if w.open < 0 {
		return
	}
	knetlink.NestEnd(w.b.buf, w.listAt)
	knetlink.SetLen(w.b.buf, w.open)
	w.open = -1
}

// finish closes the batch. Only the last element message asks for an
// acknowledgement: the kernel reports every failing message anyway, and
// delivers all reports once the batch is committed or aborted (a failed
// commit is reported on the batch's begin).
func (w *nlElemWriter) finish() {
	w.closeMsg()
	b := &w.b
	knetlink.AddFlags(b.buf, w.lastAt, unix.NLM_F_ACK)
	w.send.seq++
	end := len(b.buf)
	b.buf = knetlink.AppendHeader(b.buf, unix.NFNL_MSG_BATCH_END, unix.NLM_F_REQUEST, w.send.seq, unix.AF_UNSPEC, unix.NFNL_SUBSYS_NFTABLES)
	knetlink.SetLen(b.buf, end)
}

// start sends the batch encodeRun made, from a goroutine; wait tells how
// it went. The batch before it must have been waited for.
func (w *nlElemWriter) start() {
	f := &nlFlight{batch: w.b, done: make(chan error, 1)}
	w.flight = f
	w.b, w.spare = w.spare, nlBatch{}
	go func() { f.done <- w.transmit(&f.batch) }()
}

// wait returns the kernel's verdict on the batch in flight (nil if there
// is none).
func (w *nlElemWriter) wait() error {
	f := w.flight
	if f == nil {
		return nil
	}
	err := <-f.done
	w.flight, w.spare = nil, f.batch
	return err
}

// transmit sends b and waits for the kernel's verdict.
func (w *nlElemWriter) transmit(b *nlBatch) error {
	if err := w.growSndbuf(len(b.buf)); err != nil {
		return err
	}
	if err := knetlink.Send(w.send.fd, b.buf); err != nil {
		w.send.broken = true
		return fmt.Errorf("netlink batch send: %w", err)
	}
	return verdict(w.send, b)
}

// verdict reads the kernel's verdict on batch b, just sent on c. The
// kernel processes a batch inside sendmsg and queues every report of it
// (each failing message's, the last message's ack, and, after a failed
// commit, its error on the batch's begin before the others) before sendmsg
// returns; after a rejection, the reports the verdict did not need are
// dropped, so that c holds nothing when the next Apply sends on it.
func verdict(c *nlConn, b *nlBatch) error {
	err := receiveVerdict(c, b)
	if err != nil && !c.broken {
		if derr := knetlink.Drain(c.fd, c.buf); derr != nil {
			c.broken = true
		}
	}
	return err
}

// growSndbuf makes the socket's send buffer hold n bytes: a batch must go
// in one message, and one holds up to maxOps elements (≈ 1–2 MB).
func (w *nlElemWriter) growSndbuf(n int) error {
	if n+4096 <= w.send.sndbuf {
		return nil
	}
	size := max(n+n/4, 1<<20)
	if err := unix.SetsockoptInt(w.send.fd, unix.SOL_SOCKET, unix.SO_SNDBUFFORCE, size); err != nil {
		return fmt.Errorf("netlink send buffer of %d bytes: %w", size, err)
	}
	w.send.sndbuf = size // the kernel doubles it; half is what we can count on
	return nil
}

// receiveVerdict reads the kernel's reports for batch b on c until its
// last message's acknowledgement or a failure of the whole batch, and
// returns the first error reported. Reports of anything else (none are
// expected: see verdict) are skipped by their sequence numbers; a receive
// error (a timeout, ENOBUFS) or a malformed message breaks c.
func receiveVerdict(c *nlConn, b *nlBatch) error {
	var first error
	for {
		n, err := knetlink.Receive(c.fd, c.buf)
		if err != nil {
			c.broken = true
			return fmt.Errorf("netlink batch receive: %w", err)
		}
		err = knetlink.Messages(c.buf[:n], func(typ, _ uint16, seq uint32, body []byte) error {
			if typ != unix.NLMSG_ERROR || !b.has(seq) {
				return nil // not about this batch
			}
			errno := knetlink.AckErrno(body)
			if errno != 0 && first == nil {
				first = b.failure(seq, errno)
			}
			if seq == b.lastSeq || (seq == b.beginSeq && errno != 0) {
				return knetlink.ErrEnd
			}
			return nil
		})
		if errors.Is(err, knetlink.ErrEnd) {
			return first
		}
		if err != nil {
			c.broken = true
			return err
		}
	}
}

// has reports whether seq numbers a message of b, also when the sequence
// numbers wrapped around inside it.
func (b *nlBatch) has(seq uint32) bool { return seq-b.beginSeq <= b.lastSeq-b.beginSeq }

// failure names the message seq of b in the kernel's error.
func (b *nlBatch) failure(seq uint32, errno syscall.Errno) error {
	for _, m := range b.msgs {
		if m.seq == seq {
			return fmt.Errorf("netlink batch, %s: %w", m.what, errno)
		}
	}
	return fmt.Errorf("netlink batch: %w", errno)
}
