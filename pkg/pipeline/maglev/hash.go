package maglev

import (
	"math/bits"
	"net/netip"

	"github.com/svcproxy/svcproxy/pkg/proxy"
)

// The seeds are fixed so that every node, every process and every version
// computes the same hashes: consistency across nodes is the point of the
// table. Changing one reshuffles every table and every flow, so they are
// part of the wire contract with the datapath, like a map layout.
const (
	// offsetSeed and skipSeed give each backend's two permutation hashes
	// (the paper's h1 and h2) from the same identity words.
	offsetSeed = 0x6d61676c
	skipSeed   = 0x65763231
	// flowSeed hashes a flow's 5-tuple (FlowHash).
	flowSeed = 0x666c6f77
)

// jhashInit is lookup3's arbitrary initial value, as the kernel's jhash.
const jhashInit = 0xdeadbeef

// jhash2 is Bob Jenkins' lookup3 hash over 32-bit words, as the kernel's
// jhash2 (include/linux/jhash.h) computes it: the datapath hashes flows in
// BPF with the same function, so it must stay bit for bit the kernel's.
func jhash2(k []uint32, seed uint32) uint32 {
	a := jhashInit + uint32(len(k))<<2 + seed
	b, c := a, a
	for len(k) > 3 {
		a += k[0]
		b += k[1]
		c += k[2]
		a, b, c = mix(a, b, c)
		k = k[3:]
	}
	switch len(k) {
	case 3:
		c += k[2]
		fallthrough
	case 2:
		b += k[1]
		fallthrough
	case 1:
		a += k[0]
		c = final(a, b, c)
	}
	return c
}

// mix is the kernel's __jhash_mix: six rounds of mixStep, each with the
// roles of a, b and c turned and its own rotation.
func mix(a, b, c uint32) (uint32, uint32, uint32) {
	mixStep(&a, &c, &b, 4)
	mixStep(&b, &a, &c, 6)
	mixStep(&c, &b, &a, 8)
	mixStep(&a, &c, &b, 16)
	mixStep(&b, &a, &c, 19)
	mixStep(&c, &b, &a, 4)
	return a, b, c
}

// mixStep is one line of __jhash_mix: x -= y; x ^= rol32(y, r); y += z.
func mixStep(x, y, z *uint32, r int) {
	*x -= *y
	*x ^= bits.RotateLeft32(*y, r)
	*y += *z
}

// final is the kernel's __jhash_final, one finalStep a line.
func final(a, b, c uint32) uint32 {
	finalStep(&c, b, 14)
	finalStep(&a, c, 11)
	finalStep(&b, a, 25)
	finalStep(&c, b, 16)
	finalStep(&a, c, 4)
	finalStep(&b, a, 14)
	finalStep(&c, b, 24)
	return c
}

// finalStep is one line of __jhash_final: x ^= y; x -= rol32(y, r).
func finalStep(x *uint32, y uint32, r int) {
	*x ^= y
	*x -= bits.RotateLeft32(y, r)
}

// identity returns the words a backend is known by: its address in the
// 16-byte form (an IPv4 address as IPv4-mapped IPv6) and its port. Only
// what the endpoint is goes in, never where it sits in a list, so a
// backend keeps its permutation whatever else comes or goes.
func identity(ep proxy.Endpoint) [5]uint32 {
	a := ep.IP.Unmap().As16()
	return [5]uint32{be32(a[0:4]), be32(a[4:8]), be32(a[8:12]), be32(a[12:16]), uint32(ep.Port)}
}

func be32(b []byte) uint32 {
	return uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3])
}

// Flow is a connection as the datapath sees its packets arrive: addresses
// of one family, host-order ports, and the IP protocol number (6 TCP,
// 17 UDP, 132 SCTP).
type Flow struct {
	Src, Dst         netip.Addr
	SrcPort, DstPort uint16
	Protocol         uint8
}

// FlowHash is the hash that picks a flow's slot (Table.Lookup). It is
// jhash2 with a fixed seed over the source address, the destination
// address (each as big-endian 32-bit words: one for IPv4, four for IPv6),
// then srcPort<<16|dstPort, then the protocol. Every input is what every
// node receiving the flow sees alike behind ECMP (the destination is the
// load-balancer or external IP), so every node picks the same slot.
func FlowHash(f Flow) uint32 {
	var w [10]uint32
	n := putAddr(w[:], f.Src.Unmap())
	n += putAddr(w[n:], f.Dst.Unmap())
	w[n] = uint32(f.SrcPort)<<16 | uint32(f.DstPort)
	w[n+1] = uint32(f.Protocol)
	return jhash2(w[:n+2], flowSeed)
}

// putAddr writes addr's words into w and returns how many.
func putAddr(w []uint32, addr netip.Addr) int {
	if addr.Is4() {
		a := addr.As4()
		w[0] = be32(a[:])
		return 1
	}
	a := addr.As16()
	for i := range 4 {
		w[i] = be32(a[4*i : 4*i+4])
	}
	return 4
}
