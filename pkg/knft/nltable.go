package knft

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"runtime"
	"sync"

	"golang.org/x/sys/unix"
	"sigs.k8s.io/knftables"

	"github.com/svcproxy/svcproxy/pkg/knetlink"
)

// Attribute numbers x/sys/unix does not define.
const (
	nftaSetElemKeyEnd  = 10  // NFTA_SET_ELEM_KEY_END: inclusive end of a concatenated range
	nftSetElemCatchall = 0x2 // NFT_SET_ELEM_CATCHALL
	nftSetConcat       = 0x80
	udataRuleComment   = 0 // NFTNL_UDATA_RULE_COMMENT, a TLV in the rule's userdata
)

// nfproto is the nfgen_family of an ip or ip6 table.
func nfproto(f knftables.Family) uint8 {
	if f == knftables.IPv6Family {
		return unix.NFPROTO_IPV6
	}
	return unix.NFPROTO_IPV4
}

// nlSet is a set or map as the kernel describes it.
type nlSet struct {
	name              string
	flags             uint32
	keyType, keyLen   uint32
	dataType, dataLen uint32
	size              uint32 // the most elements it holds; 0: no limit
	timeout           uint64 // its elements' default timeout, in ms; 0: none
}

// ReadBack is part of Interface. It reads over netlink; a set whose
// element layout it cannot decode is listed through nft instead.
func (k *Kernel) ReadBack(ctx context.Context, sink Sink) error {
	c, err := k.conns.get()
	if err != nil {
		return err
	}
	defer k.conns.put(c)
	if present, err := k.tableExists(c); err != nil || !present {
		return err
	}
	sink.Table()
	if err := k.readChains(c, sink); err != nil {
		return err
	}
	sets, err := k.listSets(c)
	if err != nil {
		return err
	}
	var dumps []*setDump
	for _, st := range sets {
		info := st.info()
		list, as := sink.Set(info)
		if !list {
			continue
		}
		l, ok := setLayout(st)
		switch {
		case as != nil && (!ok || !l.same(as.l)):
			sink.SetListed(info.Name) // of another layout: none of its elements
		case ok:
			dumps = append(dumps, &setDump{info: info, layout: l, data: as != nil})
		default:
			if err := readSpelled(ctx, k.nft, info.IsMap, st.name, sink); err != nil {
				return err
			}
		}
	}
	// Elements go to the sink as the workers decode them, a message at a
	// time: collecting whole sets first kept every key twice and grew
	// slices of 100k strings (≈ 45 MB of garbage at 10k×10).
	if err := k.dumpElements(ctx, dumps, sink); err != nil {
		return err
	}
	for _, d := range dumps {
		if d.undecodable {
			sink.Set(d.info) // forget what arrived before the element it could not decode
			if err := readSpelled(ctx, k.nft, d.info.IsMap, d.info.Name, sink); err != nil {
				return err
			}
		}
	}
	return nil
}

// tableExists asks the kernel for the table alone.
func (k *Kernel) tableExists(c *nlConn) (bool, error) {
	err := c.request(unix.NFT_MSG_GETTABLE, k.family, false, knetlink.AppendString(nil, unix.NFTA_TABLE_NAME, k.table),
		func([]byte) error { return nil })
	if errors.Is(err, unix.ENOENT) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("getting table %s: %w", k.table, err)
	}
	return true, nil
}

// readChains reports every chain of the table and the comments of its
// rules, in order.
func (k *Kernel) readChains(c *nlConn, sink Sink) error {
	if err := c.listChains(k.family, k.table, sink.Chain); err != nil {
		return fmt.Errorf("listing chains: %w", err)
	}
	table := knetlink.AppendString(nil, unix.NFTA_RULE_TABLE, k.table)
	err := c.request(unix.NFT_MSG_GETRULE, k.family, true, table, func(b []byte) error {
		if knetlink.CString(knetlink.Find(b, unix.NFTA_RULE_TABLE)) == k.table {
			sink.Rule(knetlink.CString(knetlink.Find(b, unix.NFTA_RULE_CHAIN)), ruleComment(knetlink.Find(b, unix.NFTA_RULE_USERDATA)),
				ruleRefs(knetlink.Find(b, unix.NFTA_RULE_EXPRESSIONS)))
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("listing rules: %w", err)
	}
	return nil
}

// ruleComment extracts the comment from a rule's userdata: TLVs of a type
// byte, a length byte and the value (the comment is NUL-terminated).
func ruleComment(udata []byte) string {
	for len(udata) >= 2 {
		typ, l := udata[0], int(udata[1])
		if 2+l > len(udata) {
			return ""
		}
		if typ == udataRuleComment {
			return knetlink.CString(udata[2 : 2+l])
		}
		udata = udata[2+l:]
	}
	return ""
}

func (k *Kernel) listSets(c *nlConn) ([]nlSet, error) {
	var sets []nlSet
	table := knetlink.AppendString(nil, unix.NFTA_SET_TABLE, k.table)
	err := c.request(unix.NFT_MSG_GETSET, k.family, true, table, func(b []byte) error {
		st, table, err := parseSet(b)
		if table == k.table && st.flags&unix.NFT_SET_ANONYMOUS == 0 {
			sets = append(sets, st)
		}
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("listing sets: %w", err)
	}
	return sets, nil
}

// parseSet reads the attributes of one NFT_MSG_NEWSET message.
func parseSet(b []byte) (st nlSet, table string, err error) {
	a := knetlink.Attrs{B: b}
	for t, d, ok := a.Next(); ok; t, d, ok = a.Next() {
		switch t {
		case unix.NFTA_SET_TABLE:
			table = knetlink.CString(d)
		case unix.NFTA_SET_NAME:
			st.name = knetlink.CString(d)
		case unix.NFTA_SET_FLAGS:
			st.flags = beUint32(d)
		case unix.NFTA_SET_KEY_TYPE:
			st.keyType = beUint32(d)
		case unix.NFTA_SET_KEY_LEN:
			st.keyLen = beUint32(d)
		case unix.NFTA_SET_DATA_TYPE:
			st.dataType = beUint32(d)
		case unix.NFTA_SET_DATA_LEN:
			st.dataLen = beUint32(d)
		case unix.NFTA_SET_TIMEOUT:
			if len(d) == 8 {
				st.timeout = binary.BigEndian.Uint64(d)
			}
		case unix.NFTA_SET_DESC:
			if v := knetlink.Find(d, unix.NFTA_SET_DESC_SIZE); len(v) == 4 {
				st.size = beUint32(v)
			}
		}
	}
	return st, table, a.Err
}

// maxDumpWorkers bounds the sets dumped at once.
const maxDumpWorkers = 4

// setDump is one set a worker reads.
type setDump struct {
	info   SetInfo
	layout *layout
	data   bool // the sink asked for data in layout, not spelled elements
	// undecodable: an element this decoder cannot spell (not something
	// render writes, e.g. a range that is no prefix); the set is then
	// listed through nft, spelled. A set asked as data is never listed
	// so: an element that is not its layout's data is left out. Written by the worker; read with
	// the dump's last batch (sent after it) and once dumpElements has
	// returned.
	undecodable bool
}

// elemBatch is the elements of one reply message of a set's dump, as data
// or spelled, back to back into text: ends holds, per element, where its key ends and
// where its value ends (each element starts where the one before it
// ended). The last batch of a dump holds no elements and has last set;
// one with restart set holds none either: the set is dumped again, and
// what came of it before is forgotten.
type elemBatch struct {
	dump    *setDump
	text    []byte
	ends    []int
	last    bool
	restart bool
}

// elemBatches recycles batches: a read-back spells its elements into a few
// buffers instead of two strings per element (≈ 330k of them at 10k×10,
// garbage as soon as the store has what it keeps).
var elemBatches = sync.Pool{New: func() any { return new(elemBatch) }}

// report hands b's elements to sink and b back to the pool.
func (b *elemBatch) report(sink Sink) {
	if b.restart {
		sink.Set(b.dump.info) // the Sink forgets the set's elements so far
	}
	start := 0
	for i := 0; i+1 < len(b.ends); i += 2 {
		keyEnd, end := b.ends[i], b.ends[i+1]
		sink.Element(b.dump.info.Name, b.text[start:keyEnd], b.text[keyEnd:end])
		start = end
	}
	if b.last && !b.dump.undecodable {
		sink.SetListed(b.dump.info.Name)
	}
	b.recycle()
}

func (b *elemBatch) recycle() {
	b.dump, b.text, b.ends, b.last, b.restart = nil, b.text[:0], b.ends[:0], false, false
	elemBatches.Put(b)
}

// dumpElements reads the elements of every set in dumps, several sets at a
// time, and reports them to sink, on the caller's goroutine, a message at a
// time. The kernel walks a set from its start again for every reply
// message of at most 32 KiB, so a dump costs O(n²/500) element visits, and
// that walk runs in the reading thread: parallel reads use the cores, and
// the caller fills the store meanwhile.
func (k *Kernel) dumpElements(ctx context.Context, dumps []*setDump, sink Sink) error {
	workers := min(len(dumps), runtime.GOMAXPROCS(0), maxDumpWorkers)
	// Taken here, by the caller's thread: a socket belongs to the
	// network namespace of the thread that opens it.
	conns := make([]*nlConn, 0, workers)
	defer func() {
		for _, c := range conns {
			k.conns.put(c)
		}
	}()
	for range workers {
		c, err := k.conns.get()
		if err != nil {
			return err
		}
		conns = append(conns, c)
	}
	next := make(chan *setDump)
	batches := make(chan *elemBatch, 4*workers)
	errs := make([]error, len(conns))
	var wg sync.WaitGroup
	for i, c := range conns {
		wg.Go(func() {
			seen := keySeens.Get().(*keySeen)
			defer keySeens.Put(seen)
			for d := range next { // after an error: drain, so the feeder never blocks
				if errs[i] == nil {
					errs[i] = d.read(c.elemDumper(k.family, k.table, d.info.Name), seen, batches)
				}
			}
		})
	}
	go func() {
		defer close(next)
		for _, d := range dumps {
			if ctx.Err() != nil {
				return
			}
			next <- d
		}
	}()
	go func() { wg.Wait(); close(batches) }()
	for b := range batches {
		b.report(sink)
	}
	return errors.Join(append(errs, ctx.Err())...)
}

// dumper is one dump of a set's elements: each is called with the
// attributes of every reply message.
type dumper func(each func(msg []byte) error) error

// elemDumper dumps set's elements over c.
func (c *nlConn) elemDumper(family uint8, table, set string) dumper {
	req := append(knetlink.AppendString(nil, unix.NFTA_SET_ELEM_LIST_TABLE, table),
		knetlink.AppendString(nil, unix.NFTA_SET_ELEM_LIST_SET, set)...)
	return func(each func([]byte) error) error {
		return c.request(unix.NFT_MSG_GETSETELEM, family, true, req, each)
	}
}

// read lists one set's elements, one batch per reply message, and
// then a last, empty one if the dump ended. A dump that lists a key twice
// is not the set (dumpcheck.go): a restart batch, and the set is dumped
// again, up to maxDumpAttempts times.
func (d *setDump) read(dump dumper, seen *keySeen, out chan<- *elemBatch) error {
	for attempt := 1; ; attempt++ {
		seen.reset()
		if err := d.readOnce(dump, seen, out); err != nil {
			return fmt.Errorf("listing elements of %s: %w", d.info.Name, err)
		}
		if d.undecodable || !seen.repeated() {
			break
		}
		if attempt == maxDumpAttempts {
			return fmt.Errorf("listing elements of %s: each of %d dumps listed an element twice (the set changed while it was listed)", d.info.Name, attempt)
		}
		restart := elemBatches.Get().(*elemBatch)
		restart.dump, restart.restart = d, true
		out <- restart
	}
	last := elemBatches.Get().(*elemBatch)
	last.dump, last.last = d, true
	out <- last
	return nil
}

// readOnce is one dump of the set's elements, reported a batch per reply
// message until an element is undecodable; seen gets their keys.
func (d *setDump) readOnce(dump dumper, seen *keySeen, out chan<- *elemBatch) error {
	return dump(func(msg []byte) error {
		if d.undecodable {
			return nil // drain the dump: the socket serves one at a time
		}
		b := elemBatches.Get().(*elemBatch)
		b.dump = d
		err := d.decode(b, msg, seen)
		if err == nil && len(b.ends) > 0 {
			out <- b
			return nil
		}
		b.recycle()
		return err
	})
}

// decode appends the elements of one reply message to b, as data or
// spelled. An element it cannot decode marks the set undecodable (it is
// listed through nft). seen gets each key.
func (d *setDump) decode(b *elemBatch, msg []byte, seen *keySeen) error {
	list := knetlink.Attrs{B: knetlink.Find(msg, unix.NFTA_SET_ELEM_LIST_ELEMENTS)}
	for t, e, ok := list.Next(); ok; t, e, ok = list.Next() {
		if t != unix.NFTA_LIST_ELEM {
			continue
		}
		start := len(b.text)
		var keyEnd int
		var err error
		if d.data {
			b.text, keyEnd, err = d.layout.decodeData(b.text, e)
		} else {
			b.text, keyEnd, err = d.layout.appendDecoded(b.text, e)
		}
		if errors.Is(err, errUndecodable) && d.data {
			// Not data of the set's layout (the kernel checks lengths,
			// so e.g. a verdict nft has no name for): left out, as
			// Knftables leaves out what does not parse into it.
			b.text = b.text[:start]
			continue
		}
		if errors.Is(err, errUndecodable) {
			d.undecodable = true
			return nil
		}
		if err != nil {
			return err
		}
		seen.add(b.text[start:keyEnd])
		b.ends = append(b.ends, keyEnd, len(b.text))
	}
	return list.Err
}
