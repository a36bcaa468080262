package knft

import (
	"strings"
	"time"

	"golang.org/x/sys/unix"
	"sigs.k8s.io/knftables"

	"github.com/svcproxy/svcproxy/pkg/knetlink"
)

// SetType is what a set's elements are, as the kernel describes the set:
// the key's and the value's nft datatype (a concatenation packs its
// fields' types, 6 bits each, the first field highest) and length, and
// the flags that change what an element is. Two sets of one name and
// different types are different objects to every rule and element that
// uses them (nft refuses a "vmap @x" over a set, an element of another key
// type, an "add map" over a set of that name), and the kernel cannot change
// a set's type in place: the set must be deleted and added again.
type SetType struct {
	Key, KeyLen uint32
	// Data and DataLen are a map's values, 0 in a set. A verdict map has
	// Data NFT_DATA_VERDICT and DataLen 0 (the kernel's own size of a
	// verdict is no property of the declaration).
	Data, DataLen uint32
	Flags         uint32 // the kernel's NFT_SET_* flags among typeFlags
	// Timeout is the default lifetime of its elements (0: none). The
	// kernel does not change it on a set that exists: a set declared
	// with another timeout must be added again.
	Timeout time.Duration
}

// typeFlags are the set flags that are part of its type: a map or a set,
// ranges or single keys, elements that expire, elements the packet path
// adds ("dynamic").
const typeFlags = unix.NFT_SET_MAP | unix.NFT_SET_INTERVAL | unix.NFT_SET_TIMEOUT | unix.NFT_SET_EVAL

// SetInfo is one set or map as a read-back reports it.
type SetInfo struct {
	Name  string
	IsMap bool
	// Size is the most elements it holds; 0: no limit, or not known.
	Size uint64
	// Type is nil when the reader cannot tell (NewKnftables over the real
	// nft, whose listings do not say).
	Type *SetType
}

// setType is st's type.
func (st nlSet) setType() *SetType {
	t := &SetType{Key: st.keyType, KeyLen: st.keyLen, Flags: st.flags & typeFlags,
		Timeout: time.Duration(st.timeout) * time.Millisecond}
	if st.flags&unix.NFT_SET_MAP != 0 {
		t.Data, t.DataLen = st.dataType, st.dataLen
		if t.Data == unix.NFT_DATA_VERDICT {
			t.DataLen = 0
		}
	}
	return t
}

// info is st as the read-back reports it.
func (st nlSet) info() SetInfo {
	return SetInfo{Name: st.name, IsMap: st.flags&unix.NFT_SET_MAP != 0, Size: uint64(st.size), Type: st.setType()}
}

// DeclaredType is the type the kernel reports for a set or map that nft
// adds with type typ (nft's type names: "ipv4_addr . inet_service") or,
// when typ is empty, typeOf (typeof expressions: "ip daddr . th dport"),
// flags and timeout (nil: none); false when the declaration holds a type
// or an expression this package does not know.
func DeclaredType(typ, typeOf string, flags []knftables.SetFlag, isMap bool, timeout *time.Duration) (SetType, bool) {
	st, ok := declSet(typ, typeOf, flags, isMap)
	if !ok {
		return SetType{}, false
	}
	t := *st.setType()
	if timeout != nil {
		// The kernel keeps milliseconds.
		t.Timeout = timeout.Truncate(time.Millisecond)
	}
	return t, true
}

// declLayout is the layout the kernel reports for a set or map declared
// with typ or typeOf (nft's type names or typeof expressions), or nil.
func declLayout(typ, typeOf string, flags []knftables.SetFlag, isMap bool) *layout {
	st, ok := declSet(typ, typeOf, flags, isMap)
	if !ok {
		return nil
	}
	l, _ := setLayout(st)
	return l
}

// declSet is the kernel's description of a set or map declared with typ
// or typeOf and flags (name and size aside).
func declSet(typ, typeOf string, flags []knftables.SetFlag, isMap bool) (nlSet, bool) {
	decl := typ
	if decl == "" {
		decl = typeOf
	}
	keyDecl, dataDecl, _ := strings.Cut(decl, " : ")
	var st nlSet
	var ok bool
	if st.keyType, st.keyLen, ok = declType(keyDecl); !ok {
		return st, false
	}
	if isMap {
		st.flags |= unix.NFT_SET_MAP
		if dataDecl == "verdict" {
			st.dataType = unix.NFT_DATA_VERDICT
		} else if st.dataType, st.dataLen, ok = declType(dataDecl); !ok {
			return st, false
		}
	}
	for _, f := range flags {
		switch f {
		case knftables.IntervalFlag:
			st.flags |= unix.NFT_SET_INTERVAL
			if strings.Contains(keyDecl, ElemSep) {
				st.flags |= nftSetConcat
			}
		case knftables.TimeoutFlag:
			st.flags |= unix.NFT_SET_TIMEOUT
		case knftables.DynamicFlag:
			st.flags |= unix.NFT_SET_EVAL
		}
	}
	return st, true
}

// declType is the kernel's type number and length of a declaration.
func declType(decl string) (typ, n uint32, ok bool) {
	parts := strings.Split(decl, ElemSep)
	for _, p := range parts {
		var ft, fl uint32
		switch {
		case p == "ipv4_addr" || p == "ip daddr" || p == "ip saddr":
			ft, fl = typeIPAddr, 4
		case p == "ipv6_addr" || p == "ip6 daddr" || p == "ip6 saddr":
			ft, fl = typeIP6Addr, 16
		case p == "inet_proto" || p == "meta l4proto":
			ft, fl = typeInetProto, 1
		case p == "inet_service" || p == "th dport":
			ft, fl = typeInetService, 2
		case strings.HasPrefix(p, "numgen "):
			ft, fl = typeInteger, 4
		default:
			return 0, 0, false
		}
		typ = typ<<concatTypeBits | ft
		if len(parts) > 1 {
			fl = uint32(knetlink.Align(int(fl)))
		}
		n += fl
	}
	return typ, n, true
}
