package knft

import (
	"encoding/binary"
	"fmt"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/svcproxy/svcproxy/pkg/knetlink"
)

// The encoder is the decoder's (nldecode.go) inverse. An element goes to
// the kernel as its data (elemdata.go: key and value in the kernel's
// layout), which appendElemData copies into the netlink attributes of one
// NFTA_LIST_ELEM after checking its length and padding against the set's
// layout. Nothing here parses nft's spelling: a unit of spelled elements
// goes through nft (nlwrite.go), which does.

// appendElemData appends one NFTA_LIST_ELEM for key and value, as data
// (a verdict map's value spelled), to b. withValue is false for deletes,
// which name the key only.
func (l *layout) appendElemData(b, key, value []byte, withValue bool) ([]byte, error) {
	if !l.validKey(key) {
		// Lengths only: formatting key would move every caller's
		// buffer to the heap.
		return b, fmt.Errorf("key of %d bytes: not data of %d bytes: %w", len(key), l.keyDataLen(), errUndecodable)
	}
	start := len(b)
	b = knetlink.NestStart(b, unix.NFTA_LIST_ELEM)
	b = l.appendKey(b, key)
	if withValue && (l.verdict || l.data != nil) {
		d := len(b)
		b = knetlink.NestStart(b, unix.NFTA_SET_ELEM_DATA)
		var err error
		if l.verdict {
			b, err = appendVerdict(b, string(value))
		} else if len(value) != fieldsLen(l.data) || !paddedZero(l.data, value) {
			err = fmt.Errorf("value of %d bytes: not data of %d bytes: %w", len(value), fieldsLen(l.data), errUndecodable)
		} else {
			b = knetlink.AppendAttr(b, unix.NFTA_DATA_VALUE, value)
		}
		if err != nil {
			return b[:start], err
		}
		knetlink.NestEnd(b, d)
	}
	knetlink.NestEnd(b, start)
	return b, nil
}

// appendKey appends NFTA_SET_ELEM_KEY and, for an interval set,
// NFTA_SET_ELEM_KEY_END (the second half of key).
func (l *layout) appendKey(b []byte, key []byte) []byte {
	var end []byte
	if l.interval {
		key, end = key[:len(key)/2], key[len(key)/2:]
	}
	n := len(b)
	b = knetlink.AppendAttr(knetlink.NestStart(b, unix.NFTA_SET_ELEM_KEY), unix.NFTA_DATA_VALUE, key)
	knetlink.NestEnd(b, n)
	if l.interval {
		n = len(b)
		b = knetlink.AppendAttr(knetlink.NestStart(b, nftaSetElemKeyEnd), unix.NFTA_DATA_VALUE, end)
		knetlink.NestEnd(b, n)
	}
	return b
}

// appendVerdict appends NFTA_DATA_VERDICT for a verdict as the store
// spells it ("goto x", "drop"; see spellVerdict).
func appendVerdict(b []byte, v string) ([]byte, error) {
	verb, chain, _ := strings.Cut(v, " ")
	var code int32
	switch verb {
	case "drop":
		code = 0 // NF_DROP
	case "accept":
		code = 1 // NF_ACCEPT
	case "continue":
		code = unix.NFT_CONTINUE
	case "return":
		code = unix.NFT_RETURN
	case "jump":
		code = unix.NFT_JUMP
	case "goto":
		code = unix.NFT_GOTO
	default:
		return b, fmt.Errorf("verdict %q: %w", v, errUndecodable)
	}
	if (code == unix.NFT_JUMP || code == unix.NFT_GOTO) != (chain != "") {
		return b, fmt.Errorf("verdict %q: %w", v, errUndecodable)
	}
	// The chain goes as a NUL-terminated string: a NUL inside would cut
	// it short, and the kernel refuses names of NFT_CHAIN_MAXNAMELEN
	// bytes or more (found by FuzzElemRoundTrip).
	if strings.IndexByte(chain, 0) >= 0 || len(chain) >= unix.NFT_CHAIN_MAXNAMELEN {
		return b, fmt.Errorf("verdict %q: chain name: %w", v, errUndecodable)
	}
	n := len(b)
	b = knetlink.NestStart(b, unix.NFTA_DATA_VERDICT)
	b = knetlink.AppendAttr(b, unix.NFTA_VERDICT_CODE, binary.BigEndian.AppendUint32(nil, uint32(code)))
	if chain != "" {
		b = append(b, knetlink.AppendString(nil, unix.NFTA_VERDICT_CHAIN, chain)...)
	}
	knetlink.NestEnd(b, n)
	return b, nil
}
