package nodeport

import (
	"encoding/binary"
	"net/netip"

	"github.com/svcproxy/svcproxy/pkg/proxy"
)

// The map keys and values, laid out as bpf/nodeport.c declares them:
// IPv4 addresses and ports in network byte order, as the packets carry
// them. The types are comparable: a map's desired contents are Go maps of
// them.

// svcKey is a frontend: address, port and IP protocol number.
type svcKey struct {
	Addr  [4]byte
	Port  [2]byte
	Proto uint8
	Pad   uint8
}

// The frontend flags.
const (
	flagDrop   = 1 // no endpoint: drop rather than reject
	flagMasq   = 2 // desired masquerades the route
	flagMaglev = 4 // the flow's Maglev slot picks the endpoint
	flagRanges = 8 // only sources in the group's prefixes (np_ranges)
)

// svcVal is where new flows to a frontend go: Count slots of group ID,
// or the MSize slots of its Maglev table; with no endpoint, a refusal.
// Affinity is the ClientIP affinity timeout in seconds, 0 for none.
type svcVal struct {
	ID       uint64
	Count    uint32
	Flags    uint32
	MSize    uint32
	Affinity uint32
}

// beKey is one slot of an endpoint group or of a Maglev table.
type beKey struct {
	ID   uint64
	Slot uint32
	Pad  uint32
}

// beVal is an endpoint.
type beVal struct {
	Addr [4]byte
	Port [2]byte
	Pad  [2]byte
}

// srcKey is an allowed source prefix of a group's LB IPs, an LPM trie
// key: Prefixlen counts the ID's 64 bits and the prefix's. The ID is two
// host-order words, so that the address follows it without padding.
type srcKey struct {
	Prefixlen uint32
	ID        [2]uint32
	Addr      [4]byte
}

func sourceKey(id uint64, p netip.Prefix) srcKey {
	return srcKey{Prefixlen: 64 + uint32(p.Bits()), ID: [2]uint32{uint32(id), uint32(id >> 32)}, Addr: p.Masked().Addr().As4()}
}

// memberKey is an endpoint of a group with ClientIP affinity: a client's
// remembered endpoint counts only while it is one.
type memberKey struct {
	ID   uint64
	Addr [4]byte
	Port [2]byte
	Pad  uint16
}

func memberOf(id uint64, ep proxy.Endpoint) memberKey {
	return memberKey{ID: id, Addr: ep.IP.Unmap().As4(), Port: netPort(ep.Port)}
}

// cfgVal is the programs' one configuration record: the address flows to
// endpoints on other nodes are masqueraded to. MasqMark is unused (zero):
// it stays for the layout of pinned maps.
type cfgVal struct {
	SNAT     [4]byte
	MasqMark uint32
}

// MasqueradePort says whether port is one the programs give a flow they
// masquerade to an endpoint on another node: 1024-65535 less Linux's
// default ephemeral range, as bpf/nodeport.c's SNAT_* say.
func MasqueradePort(port uint16) bool { return port >= 1024 && (port < 32768 || port >= 61000) }

// The IP protocols the programs translate.
var protoNumbers = map[proxy.Protocol]uint8{proxy.TCP: 6, proxy.UDP: 17}

func netPort(p uint16) [2]byte {
	var b [2]byte
	binary.BigEndian.PutUint16(b[:], p)
	return b
}

func frontendKey(addr netip.Addr, port uint16, proto uint8) svcKey {
	return svcKey{Addr: addr.As4(), Port: netPort(port), Proto: proto}
}

func endpointVal(ep proxy.Endpoint) beVal {
	return beVal{Addr: ep.IP.Unmap().As4(), Port: netPort(ep.Port)}
}

// AddrPort is the endpoint's address and port.
func (v beVal) AddrPort() netip.AddrPort {
	return netip.AddrPortFrom(netip.AddrFrom4(v.Addr), binary.BigEndian.Uint16(v.Port[:]))
}
