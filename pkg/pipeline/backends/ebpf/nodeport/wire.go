package nodeport

import (
	"encoding/binary"
	"net/netip"

	"github.com/svcproxy/svcproxy/pkg/proxy"
)

// The map keys and values, laid out as bpf/nodeport.c declares them
// (and bpf/six.h for IPv6): addresses and ports in network byte order, as
// the packets carry them. Each is generic over the family's address, A;
// the unqualified names are IPv4's. The types are comparable: a map's
// desired contents are Go maps of them.

// addrBytes is an address as the maps hold it: IPv4's 4 bytes or IPv6's
// 16.
type addrBytes interface{ [4]byte | [16]byte }

// addrOf is ip as the maps of A's family hold it.
func addrOf[A addrBytes](ip netip.Addr) A {
	var a A
	switch p := any(&a).(type) {
	case *[4]byte:
		*p = ip.Unmap().As4()
	case *[16]byte:
		*p = ip.As16()
	}
	return a
}

// netipOf is a, an address of the maps, as a netip.Addr.
func netipOf[A addrBytes](a A) netip.Addr {
	switch p := any(a).(type) {
	case [4]byte:
		return netip.AddrFrom4(p)
	case [16]byte:
		return netip.AddrFrom16(p)
	}
	return netip.Addr{}
}

// familyOf is the IP family of A.
func familyOf[A addrBytes]() proxy.IPFamily {
	var a A
	if len(a) == 16 {
		return proxy.IPv6
	}
	return proxy.IPv4
}

// svcKeyOf is a frontend: address, port and IP protocol number.
type svcKeyOf[A addrBytes] struct {
	Addr  A
	Port  [2]byte
	Proto uint8
	// Scope is scopeDirect or scopeTunnel (bpf/nodeport.c's NP_SCOPE_*).
	Scope uint8
}

type svcKey = svcKeyOf[[4]byte]

// The frontend flags.
const (
	flagDrop   = 1  // no endpoint: drop rather than reject
	flagMasq   = 2  // desired masquerades the route
	flagMaglev = 4  // the flow's Maglev slot picks the endpoint
	flagRanges = 8  // only sources in the group's prefixes (np_ranges)
	flagDSR    = 16 // an endpoint on a peer node (np_tunnels) is reached by tunnel
)

// inClusterID is the group ID no group takes (probe skips it): np_ranges
// holds under it the State's ClusterSources, the clients direct server
// return never tunnels.
const inClusterID = 0

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

// beValOf is an endpoint.
type beValOf[A addrBytes] struct {
	Addr A
	Port [2]byte
	Pad  [2]byte
}

type beVal = beValOf[[4]byte]

// srcKey is an allowed source prefix of a group's LB IPs, an LPM trie
// key: Prefixlen counts the ID's 64 bits and the prefix's. The ID is two
// host-order words, so that the address follows it without padding.
type srcKeyOf[A addrBytes] struct {
	Prefixlen uint32
	ID        [2]uint32
	Addr      A
}

type srcKey = srcKeyOf[[4]byte]

func sourceKey[A addrBytes](id uint64, p netip.Prefix) srcKeyOf[A] {
	return srcKeyOf[A]{Prefixlen: 64 + uint32(p.Bits()), ID: [2]uint32{uint32(id), uint32(id >> 32)},
		Addr: addrOf[A](p.Masked().Addr())}
}

// memberKey is an endpoint of a group with ClientIP affinity: a client's
// remembered endpoint counts only while it is one. The ID is two
// host-order words (C's u64), so that IPv6's key has no padding (packed to
// 4-byte alignment in C: 28 bytes).
type memberKeyOf[A addrBytes] struct {
	ID   [2]uint32
	Addr A
	Port [2]byte
	Pad  uint16
}

type memberKey = memberKeyOf[[4]byte]

func memberOf[A addrBytes](id uint64, ep proxy.Endpoint) memberKeyOf[A] {
	return memberKeyOf[A]{ID: [2]uint32{uint32(id), uint32(id >> 32)}, Addr: addrOf[A](ep.IP), Port: netPort(ep.Port)}
}

// cfgVal is the programs' one configuration record: the address flows to
// endpoints on other nodes are masqueraded to, and flags (cfgDraining).
// Flags was once a mark and keeps its place in the layout of pinned maps;
// a sync writes it zero.
type cfgValOf[A addrBytes] struct {
	SNAT  A
	Flags uint32
}

// cfgDraining is bpf/nodeport.c's NP_CFG_DRAINING: the drain has begun
// (BeginDrain), and a reply the programs would translate that a flow of
// the kernel's conntrack claims is left to the stack.
const cfgDraining = 1

type cfgVal = cfgValOf[[4]byte]

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

func frontendKey[A addrBytes](addr netip.Addr, port uint16, proto uint8) svcKeyOf[A] {
	return svcKeyOf[A]{Addr: addrOf[A](addr), Port: netPort(port), Proto: proto}
}

func endpointVal[A addrBytes](ep proxy.Endpoint) beValOf[A] {
	return beValOf[A]{Addr: addrOf[A](ep.IP), Port: netPort(ep.Port)}
}

// AddrPort is the endpoint's address and port.
func (v beValOf[A]) AddrPort() netip.AddrPort {
	return netip.AddrPortFrom(netipOf(v.Addr), binary.BigEndian.Uint16(v.Port[:]))
}

// The frontend scopes: which packets look a frontend up.
const (
	scopeDirect = 0 // packets that arrive as they are
	scopeTunnel = 1 // packets a peer node tunnelled here (DSR), decapsulated
)

// tunnelValOf is where a flow to an endpoint on a peer node is tunnelled:
// that node's address. IPv4's has a flags word (none yet); IPv6's is the
// address alone.
type tunnelVal struct {
	Node  [4]byte
	Flags uint32
}

type tunnelVal6 struct{ Node [16]byte }

// peerVal is np_peers' value: present means the node decapsulates.
type peerVal = uint32
