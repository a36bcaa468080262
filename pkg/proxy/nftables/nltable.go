package nftables

import (
	"context"
	"errors"
	"fmt"
	"strings"

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
	for _, st := range sets {
		if err := ctx.Err(); err != nil {
			return err
		}
		isMap := st.flags&unix.NFT_SET_MAP != 0
		s.sets[st.name] = &setEntry{present: true, isMap: isMap}
		if strings.HasPrefix(st.name, affinityPrefix) {
			continue
		}
		l, ok := setLayout(st)
		if !ok {
			if err := s.readBackElements(ctx, nft, isMap, st.name); err != nil {
				return err
			}
			continue
		}
		if err := s.readElementsNetlink(c, family, st.name, l); err != nil {
			return err
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
		st := nlSet{}
		a := attrs{b: b}
		table := ""
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
			}
		}
		if table == TableName && st.flags&unix.NFT_SET_ANONYMOUS == 0 {
			sets = append(sets, st)
		}
		return a.err
	})
	if err != nil {
		return nil, fmt.Errorf("listing sets: %w", err)
	}
	return sets, nil
}

// readElementsNetlink records the elements of one set in the store's
// string form.
func (s *store) readElementsNetlink(c *nlConn, family uint8, name string, l *layout) error {
	req := append(attrString(unix.NFTA_SET_ELEM_LIST_TABLE, TableName),
		attrString(unix.NFTA_SET_ELEM_LIST_SET, name)...)
	var sb strings.Builder
	err := c.request(unix.NFT_MSG_GETSETELEM, family, true, req, func(b []byte) error {
		list := attrs{b: find(b, unix.NFTA_SET_ELEM_LIST_ELEMENTS)}
		for t, d, ok := list.next(); ok; t, d, ok = list.next() {
			if t != unix.NFTA_LIST_ELEM {
				continue
			}
			key, value, err := l.decode(d, &sb)
			if err != nil {
				return fmt.Errorf("set %s: %w", name, err)
			}
			e := s.elem(name, key, true)
			e.present, e.kernel = true, value
		}
		return list.err
	})
	if err != nil {
		return fmt.Errorf("listing elements of %s: %w", name, err)
	}
	return nil
}
