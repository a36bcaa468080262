package nftables

import (
	"encoding/binary"
	"errors"
	"fmt"
	"syscall"

	"golang.org/x/sys/unix"
)

// Element changes over netlink. A cold sync at 10k services × 10 endpoints
// is ≈ 330k element operations; through nft, parsing their text cost
// ≈ 1.6 s of user CPU in nft plus our rendering of it. The kernel takes the
// same changes as NFT_MSG_NEWSETELEM / NFT_MSG_DELSETELEM messages inside
// one NFNL_MSG_BATCH_BEGIN … END batch — a transaction, exactly like the
// one nft would send — so runs of element units are encoded here
// (nlencode.go) and everything else still goes through nft.

// netlinkElements switches element runs to netlink on the real kernel;
// off, every operation goes through nft as before.
var netlinkElements = true

// maxElemListBytes bounds one message's element list: its length is a
// 16-bit netlink attribute length.
const maxElemListBytes = 48 << 10

// nlElemWriter builds and commits batches of element changes for one
// family. It lives for one sync: its socket belongs to the network
// namespace of the thread that opened it.
type nlElemWriter struct {
	c      *nlConn
	family uint8
	// layouts caches the kernel's layout per set; a nil value means the
	// set is absent or not encodable. Cleared whenever nft ran, since nft
	// may have deleted or added sets.
	layouts map[string]*layout
	sndbuf  int

	buf      []byte
	msgs     []batchMsg
	beginSeq uint32
	open     int // offset of the open element message, -1 if none
	openSet  string
	openDel  bool
	listAt   int // offset of the open message's element list
	lastAt   int // offset of the last element message
	lastSeq  uint32
	scratch  []byte
}

// batchMsg is one element message of the batch, for error reports. Seqs
// are not consecutive: set lookups on the same socket take some.
type batchMsg struct {
	seq  uint32
	what string
}

func newElemWriter(family uint8) (*nlElemWriter, error) {
	c, err := dialNetfilter()
	if err != nil {
		return nil, err
	}
	// Errors then carry only the failing message's header, not its
	// (up to 48 KiB) payload.
	if err := unix.SetsockoptInt(c.fd, unix.SOL_NETLINK, unix.NETLINK_CAP_ACK, 1); err != nil {
		c.close()
		return nil, fmt.Errorf("netlink NETLINK_CAP_ACK: %w", err)
	}
	// A reply that never comes must not hang the syncer: fail the sync
	// (the next one is full and reads the table back) instead.
	tv := unix.Timeval{Sec: 60}
	if err := unix.SetsockoptTimeval(c.fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv); err != nil {
		c.close()
		return nil, fmt.Errorf("netlink SO_RCVTIMEO: %w", err)
	}
	return &nlElemWriter{c: c, family: family, layouts: map[string]*layout{}, open: -1}, nil
}

func (w *nlElemWriter) close() { w.c.close() }

// nftRan forgets the set layouts: nft may have changed the sets.
func (w *nlElemWriter) nftRan() { clear(w.layouts) }

// layout returns set's layout as the kernel reports it, or nil.
func (w *nlElemWriter) layout(set string) *layout {
	l, ok := w.layouts[set]
	if ok {
		return l
	}
	req := append(attrString(unix.NFTA_SET_TABLE, TableName), attrString(unix.NFTA_SET_NAME, set)...)
	var st nlSet
	err := w.c.request(unix.NFT_MSG_GETSET, w.family, false, req, func(b []byte) error {
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
// encodes.
func (w *nlElemWriter) canWrite(u *unit) bool {
	return len(u.els) > 0 && w.layout(u.els[0].set) != nil
}

// writeRun commits, in one batch, the leading units of us that it can
// encode, and returns how many those were (0: the first one is not for
// netlink). Their order is kept.
func (w *nlElemWriter) writeRun(us []*unit) (int, error) {
	w.reset()
	n := 0
	for ; n < len(us) && w.canWrite(us[n]); n++ {
		if !w.addRun(us[n]) {
			break // not encodable after all: nft gets it
		}
	}
	if n == 0 {
		return 0, nil
	}
	return n, w.commit()
}

func (w *nlElemWriter) reset() {
	w.buf, w.msgs, w.open = w.buf[:0], w.msgs[:0], -1
	w.c.seq++
	w.beginSeq = w.c.seq
	w.buf = appendNlHdr(w.buf, unix.NFNL_MSG_BATCH_BEGIN, unix.NLM_F_REQUEST, w.beginSeq, unix.AF_UNSPEC, unix.NFNL_SUBSYS_NFTABLES)
	binary.NativeEndian.PutUint32(w.buf, uint32(len(w.buf)))
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
func (w *nlElemWriter) addRun(u *unit) bool {
	m := writerMark{len(w.buf), len(w.msgs), w.open, w.listAt, w.lastAt, w.openSet, w.openDel, w.lastSeq}
	for _, e := range u.els {
		op := elemChange(e, u.isMap)
		if err := w.add(&op); err != nil {
			w.buf, w.msgs, w.open, w.listAt, w.lastAt = w.buf[:m.buf], w.msgs[:m.msgs], m.open, m.listAt, m.lastAt
			w.openSet, w.openDel, w.lastSeq = m.openSet, m.openDel, m.lastSeq
			return false
		}
	}
	return true
}

// add encodes one element change, or nothing if any part of it fails: a
// delete and the re-add of its key are encoded first, then appended.
func (w *nlElemWriter) add(o *elemOp) error {
	set, key := o.entry.set, o.entry.key
	l := w.layouts[set]
	// Both encodings go into scratch, the delete first: a nil base would
	// allocate (and grow) a new slice per element.
	var del, add []byte
	buf := w.scratch[:0]
	var err error
	if o.del {
		if buf, err = l.appendElem(buf, key, "", false); err != nil {
			return err
		}
		del = buf
	}
	if o.add {
		if buf, err = l.appendElem(buf, key, o.value, true); err != nil {
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

// appendElem appends an encoded NFTA_LIST_ELEM to the open message if it
// is for the same set and verb and has room, else to a new message.
func (w *nlElemWriter) appendElem(set string, del bool, elem []byte) {
	if w.open < 0 || w.openSet != set || w.openDel != del || len(w.buf)-w.listAt+len(elem) > maxElemListBytes {
		w.closeMsg()
		w.openMsg(set, del)
	}
	w.buf = append(w.buf, elem...)
}

func (w *nlElemWriter) openMsg(set string, del bool) {
	msg, flags, verb := uint16(unix.NFT_MSG_NEWSETELEM), uint16(unix.NLM_F_REQUEST|unix.NLM_F_CREATE), "adding elements to "
	if del {
		msg, flags, verb = unix.NFT_MSG_DELSETELEM, unix.NLM_F_REQUEST, "deleting elements from "
	}
	w.c.seq++
	w.open, w.lastAt, w.lastSeq, w.openSet, w.openDel = len(w.buf), len(w.buf), w.c.seq, set, del
	w.msgs = append(w.msgs, batchMsg{seq: w.c.seq, what: verb + set})
	w.buf = appendNlHdr(w.buf, unix.NFNL_SUBSYS_NFTABLES<<8|msg, flags, w.c.seq, w.family, 0)
	w.buf = append(w.buf, attrString(unix.NFTA_SET_ELEM_LIST_TABLE, TableName)...)
	w.buf = append(w.buf, attrString(unix.NFTA_SET_ELEM_LIST_SET, set)...)
	w.listAt = len(w.buf)
	w.buf = nestStart(w.buf, unix.NFTA_SET_ELEM_LIST_ELEMENTS)
}

// closeMsg fills in the lengths of the open message and its element list.
func (w *nlElemWriter) closeMsg() {
	if w.open < 0 {
		return
	}
	nestEnd(w.buf, w.listAt)
	binary.NativeEndian.PutUint32(w.buf[w.open:], uint32(len(w.buf)-w.open))
	w.open = -1
}

// appendNlHdr appends a netlink header and an nfgenmsg; the length is
// filled in by the caller.
func appendNlHdr(b []byte, typ, flags uint16, seq uint32, family uint8, resID uint16) []byte {
	b = binary.NativeEndian.AppendUint32(b, 0)
	b = binary.NativeEndian.AppendUint16(b, typ)
	b = binary.NativeEndian.AppendUint16(b, flags)
	b = binary.NativeEndian.AppendUint32(b, seq)
	b = binary.NativeEndian.AppendUint32(b, 0) // port id: the kernel's
	b = append(b, family, unix.NFNETLINK_V0)
	return binary.BigEndian.AppendUint16(b, resID)
}

// commit sends the batch and waits for the kernel's verdict. Only the last
// element message asks for an acknowledgement: the kernel reports every
// failing message anyway, and delivers all reports once the batch is
// committed or aborted (a failed commit is reported on the batch's begin).
func (w *nlElemWriter) commit() error {
	w.closeMsg()
	// Not w.c.seq: set lookups between messages take seqs too.
	last := w.lastSeq
	// The last message's flags: NLM_F_ACK.
	binary.NativeEndian.PutUint16(w.buf[w.lastAt+6:], binary.NativeEndian.Uint16(w.buf[w.lastAt+6:])|unix.NLM_F_ACK)
	w.c.seq++
	end := len(w.buf)
	w.buf = appendNlHdr(w.buf, unix.NFNL_MSG_BATCH_END, unix.NLM_F_REQUEST, w.c.seq, unix.AF_UNSPEC, unix.NFNL_SUBSYS_NFTABLES)
	binary.NativeEndian.PutUint32(w.buf[end:], uint32(len(w.buf)-end))
	if err := w.growSndbuf(len(w.buf)); err != nil {
		return err
	}
	if err := unix.Sendto(w.c.fd, w.buf, 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return fmt.Errorf("netlink batch send: %w", err)
	}
	return w.receive(last)
}

// growSndbuf makes the socket's send buffer hold n bytes: a batch must go
// in one message, and one holds up to maxOps elements (≈ 1–2 MB).
func (w *nlElemWriter) growSndbuf(n int) error {
	if n+4096 <= w.sndbuf {
		return nil
	}
	size := max(n+n/4, 1<<20)
	if err := unix.SetsockoptInt(w.c.fd, unix.SOL_SOCKET, unix.SO_SNDBUFFORCE, size); err != nil {
		return fmt.Errorf("netlink send buffer of %d bytes: %w", size, err)
	}
	w.sndbuf = size // the kernel doubles it; half is what we can count on
	return nil
}

// receive reads the kernel's reports for the batch until the last
// message's acknowledgement or a failure of the whole batch, and returns
// the first error reported.
func (w *nlElemWriter) receive(last uint32) error {
	var first error
	for {
		n, _, rflags, _, err := unix.Recvmsg(w.c.fd, w.c.buf, nil, 0)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return fmt.Errorf("netlink batch receive: %w", err)
		}
		if rflags&unix.MSG_TRUNC != 0 {
			return fmt.Errorf("netlink batch receive: message truncated")
		}
		for b := w.c.buf[:n]; len(b) >= unix.NLMSG_HDRLEN; {
			l := int(binary.NativeEndian.Uint32(b))
			if l < unix.NLMSG_HDRLEN || l > len(b) {
				return errMalformed
			}
			typ, seq, body := binary.NativeEndian.Uint16(b[4:]), binary.NativeEndian.Uint32(b[8:]), b[unix.NLMSG_HDRLEN:l]
			b = b[min(nlAlign(l), len(b)):]
			if typ != unix.NLMSG_ERROR || seq < w.beginSeq || seq > last {
				continue // not about this batch
			}
			if len(body) < 4 {
				return errMalformed
			}
			errno := syscall.Errno(-int32(binary.NativeEndian.Uint32(body)))
			if errno != 0 && first == nil {
				first = fmt.Errorf("netlink batch: %w", errno)
				for _, m := range w.msgs {
					if m.seq == seq {
						first = fmt.Errorf("netlink batch, %s: %w", m.what, errno)
					}
				}
			}
			if seq == last || (seq == w.beginSeq && errno != 0) {
				return first
			}
		}
	}
}
