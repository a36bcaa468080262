package nftables

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"

	"golang.org/x/sys/unix"
	"sigs.k8s.io/knftables"

	"github.com/svcproxy/svcproxy/pkg/proxy"
)

// Attribute numbers x/sys/unix does not define.
const (
	nftaSetElemKeyEnd  = 10  // NFTA_SET_ELEM_KEY_END: inclusive end of a concatenated range
	nftSetElemCatchall = 0x2 // NFT_SET_ELEM_CATCHALL
	nftSetConcat       = 0x80
	udataRuleComment   = 0 // NFTNL_UDATA_RULE_COMMENT, a TLV in the rule's userdata
)

// nfproto is the nfgen_family of f's table.
func nfproto(f proxy.IPFamily) uint8 {
	if f == proxy.IPv6 {
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
}

// readBackNetlink fills the kernel side of the store like readBackKnftables
// but over netlink. A set whose element layout it cannot decode is listed
// through nft instead (nft).
func (s *store) readBackNetlink(ctx context.Context, nft knftables.Interface, family uint8) error {
	c, err := dialNetfilter()
	if err != nil {
		return err
	}
	defer c.close()
	err = c.request(unix.NFT_MSG_GETTABLE, family, false, attrString(unix.NFTA_TABLE_NAME, TableName),
		func([]byte) error { return nil })
	if errors.Is(err, unix.ENOENT) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("getting table: %w", err)
	}
	s.tablePresent = true
	if err := s.readChainsNetlink(c, family); err != nil {
		return err
	}
	sets, err := listSetsNetlink(c, family)
	if err != nil {
		return err
	}
	var dumps []*setDump
	for _, st := range sets {
		isMap := st.flags&unix.NFT_SET_MAP != 0
		s.sets[st.name] = &setEntry{present: true, isMap: isMap, size: uint64(st.size)}
		if strings.HasPrefix(st.name, affinityPrefix) {
			continue
		}
		if l, ok := setLayout(st); ok {
			dumps = append(dumps, &setDump{name: st.name, layout: l})
			if st.size > 0 {
				// Sized by this code to twice what it held (epMapSize);
				// capped in case someone else's is huge.
				s.elems[st.name] = make(map[string]*elemEntry, min(st.size/2, 1<<17))
			}
		} else if err := s.readBackElements(ctx, nft, isMap, st.name); err != nil {
			return err
		}
	}
	// Elements go into the store as the workers decode them, a message
	// at a time: collecting whole sets first kept every key twice and grew
	// slices of 100k strings (≈ 45 MB of garbage at 10k×10).
	err = dumpElements(ctx, family, dumps, func(b elemBatch) {
		for i := 0; i+1 < len(b.kv); i += 2 {
			e := s.elem(b.set, b.kv[i], true)
			e.present, e.kernel = true, b.kv[i+1]
		}
	})
	if err != nil {
		return err
	}
	for _, d := range dumps {
		if d.undecodable {
			delete(s.elems, d.name) // what arrived before the element it could not spell
			if err := s.readBackElements(ctx, nft, s.sets[d.name].isMap, d.name); err != nil {
				return err
			}
		}
	}
	return nil
}

// readChainsNetlink records every chain of the table and the comments of
// its rules, in order.
func (s *store) readChainsNetlink(c *nlConn, family uint8) error {
	table := attrString(unix.NFTA_CHAIN_TABLE, TableName)
	err := c.request(unix.NFT_MSG_GETCHAIN, family, true, table, func(b []byte) error {
		if cString(find(b, unix.NFTA_CHAIN_TABLE)) != TableName {
			return nil
		}
		if name := cString(find(b, unix.NFTA_CHAIN_NAME)); s.chains[name] == nil {
			s.chains[name] = &chainEntry{present: true}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("listing chains: %w", err)
	}
	table = attrString(unix.NFTA_RULE_TABLE, TableName)
	err = c.request(unix.NFT_MSG_GETRULE, family, true, table, func(b []byte) error {
		if cString(find(b, unix.NFTA_RULE_TABLE)) != TableName {
			return nil
		}
		name := cString(find(b, unix.NFTA_RULE_CHAIN))
		e := s.chains[name]
		if e == nil {
			e = &chainEntry{present: true}
			s.chains[name] = e
		}
		e.kernel = append(e.kernel, ruleComment(find(b, unix.NFTA_RULE_USERDATA)))
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
			return cString(udata[2 : 2+l])
		}
		udata = udata[2+l:]
	}
	return ""
}

func listSetsNetlink(c *nlConn, family uint8) ([]nlSet, error) {
	var sets []nlSet
	table := attrString(unix.NFTA_SET_TABLE, TableName)
	err := c.request(unix.NFT_MSG_GETSET, family, true, table, func(b []byte) error {
		st, table, err := parseSet(b)
		if table == TableName && st.flags&unix.NFT_SET_ANONYMOUS == 0 {
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
	a := attrs{b: b}
	for t, d, ok := a.next(); ok; t, d, ok = a.next() {
		switch t {
		case unix.NFTA_SET_TABLE:
			table = cString(d)
		case unix.NFTA_SET_NAME:
			st.name = cString(d)
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
		case unix.NFTA_SET_DESC:
			if v := find(d, unix.NFTA_SET_DESC_SIZE); len(v) == 4 {
				st.size = beUint32(v)
			}
		}
	}
	return st, table, a.err
}

// setDump is one set a worker reads.
type setDump struct {
	name   string
	layout *layout
	// undecodable: an element this decoder cannot spell (not something
	// render writes, e.g. a catch-all or a range that is no prefix); the
	// set is then listed through nft. Written by the worker, read once
	// dumpElements has returned.
	undecodable bool
}

// elemBatch is the elements of one reply message: keys and values
// alternate in kv.
type elemBatch struct {
	set string
	kv  []string
}

// dumpElements reads the elements of every set in dumps, several sets at a
// time, and hands them to take, on the caller's goroutine, a message at a
// time. The kernel walks a set from its start again for every reply
// message of at most 32 KiB, so a dump costs O(n²/500) element visits, and
// that walk runs in the reading thread: parallel reads use the cores, and
// the caller fills the store meanwhile.
func dumpElements(ctx context.Context, family uint8, dumps []*setDump, take func(elemBatch)) error {
	workers := min(len(dumps), runtime.GOMAXPROCS(0), 4)
	// Opened here, by the caller's thread: a socket belongs to the
	// network namespace of the thread that creates it.
	conns := make([]*nlConn, 0, workers)
	defer func() {
		for _, c := range conns {
			c.close()
		}
	}()
	for range workers {
		c, err := dialNetfilter()
		if err != nil {
			return err
		}
		conns = append(conns, c)
	}
	next := make(chan *setDump)
	batches := make(chan elemBatch, 4*workers)
	errs := make([]error, len(conns))
	var wg sync.WaitGroup
	for i, c := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for d := range next { // after an error: drain, so the feeder never blocks
				if errs[i] == nil {
					errs[i] = d.read(c, family, batches)
				}
			}
		}()
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
		take(b)
	}
	return errors.Join(append(errs, ctx.Err())...)
}

// read lists one set's elements in the store's string form, one batch per
// reply message.
func (d *setDump) read(c *nlConn, family uint8, out chan<- elemBatch) error {
	req := append(attrString(unix.NFTA_SET_ELEM_LIST_TABLE, TableName),
		attrString(unix.NFTA_SET_ELEM_LIST_SET, d.name)...)
	var sb strings.Builder
	last := 0 // the previous message's length: messages are alike
	err := c.request(unix.NFT_MSG_GETSETELEM, family, true, req, func(b []byte) error {
		if d.undecodable {
			return nil // drain the dump: the socket serves one at a time
		}
		kv := make([]string, 0, last)
		list := attrs{b: find(b, unix.NFTA_SET_ELEM_LIST_ELEMENTS)}
		for t, e, ok := list.next(); ok; t, e, ok = list.next() {
			if t != unix.NFTA_LIST_ELEM {
				continue
			}
			key, value, err := d.layout.decode(e, &sb)
			if errors.Is(err, errUndecodable) {
				d.undecodable = true
				return nil
			}
			if err != nil {
				return err
			}
			kv = append(kv, key, value)
		}
		if last = len(kv); last > 0 {
			out <- elemBatch{set: d.name, kv: kv}
		}
		return list.err
	})
	if err != nil {
		return fmt.Errorf("listing elements of %s: %w", d.name, err)
	}
	return nil
}
