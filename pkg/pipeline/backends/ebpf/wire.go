package ebpf

import (
	"encoding/binary"
	"net/netip"

	"github.com/svcproxy/svcproxy/pkg/proxy"
)

// The map keys and values, laid out as bpf/sock.c declares them. Every
// address is 16 bytes (IPv4 as ::ffff:a.b.c.d) and every port is in
// network byte order, so that the programs compare them without
// conversions. The types are comparable: the desired contents of a map are
// Go maps of them.

// svcKey is a frontend: address, port and IP protocol number.
type svcKey struct {
	Addr  [16]byte
	Port  [2]byte
	Proto uint8
	Pad   uint8
}

// target is where one class of sockets goes: Count slots of group ID, or,
// with none, a refusal as Flags say.
type target struct {
	ID    uint64
	Count uint32
	Flags uint32
}

// flagDrop says a target without endpoints drops rather than rejects.
const flagDrop = 1

// svcVal is what a frontend does for pods' sockets and for the node's.
type svcVal struct {
	Pod      target
	Node     target
	Affinity uint32
	Pad      uint32
}

// ids returns the groups v points at.
func (v svcVal) ids() [2]target { return [2]target{v.Pod, v.Node} }

// anyPort is the frontend of a cluster IP's ports the Service lacks.
func anyPort(clusterIP netip.Addr) svcKey { return svcKey{Addr: clusterIP.As16()} }

// beKey is one slot of an endpoint group.
type beKey struct {
	ID   uint64
	Slot uint32
	Pad  uint32
}

// beVal is an endpoint.
type beVal struct {
	Addr [16]byte
	Port [2]byte
	Pad  [2]byte
}

// revKey is a reverse translation's key (struct rev_key): a translated
// socket's cookie and the endpoint it talks to.
type revKey struct {
	Cookie uint64
	Addr   [16]byte
	Port   [2]byte
	Pad    [6]byte
}

// The protocol numbers the hooks see in the socket.
var protoNumbers = map[proxy.Protocol]uint8{proxy.TCP: 6, proxy.UDP: 17, proxy.SCTP: 132}

func frontendKey(addr netip.Addr, port uint16, proto uint8) svcKey {
	return svcKey{Addr: addr.As16(), Port: netPort(port), Proto: proto}
}

func endpointVal(ep proxy.Endpoint) beVal {
	return beVal{Addr: ep.IP.As16(), Port: netPort(ep.Port)}
}

func netPort(p uint16) [2]byte {
	var b [2]byte
	binary.BigEndian.PutUint16(b[:], p)
	return b
}

// String renders a frontend for logs and test failures.
func (k svcKey) String() string {
	return netip.AddrPortFrom(netip.AddrFrom16(k.Addr).Unmap(), binary.BigEndian.Uint16(k.Port[:])).String()
}

// AddrPort is the endpoint's address and port.
func (v beVal) AddrPort() netip.AddrPort {
	return netip.AddrPortFrom(netip.AddrFrom16(v.Addr).Unmap(), binary.BigEndian.Uint16(v.Port[:]))
}

// sockRec is what the socket iterator writes for each translated socket:
// its cookie, its local address, the endpoint it is connected to and the
// frontend it addressed, and whether this run destroyed it.
type sockRec struct {
	Cookie              uint64
	Local, Peer, Front  [16]byte
	Lport, Pport, Fport [2]byte
	Destroyed           uint8
	Pad                 uint8
}
