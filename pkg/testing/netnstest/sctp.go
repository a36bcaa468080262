package netnstest

// SCTP without an SCTP stack: this kernel has no sctp module (socket(...,
// IPPROTO_SCTP) fails with EPROTONOSUPPORT), but netfilter's SCTP conntrack
// and NAT are built in, and those are what a proxy test exercises. So the
// client sends a real SCTP INIT chunk over a raw IP socket and the server,
// also on a raw socket, answers with a real INIT ACK whose State Cookie
// carries the echo answer. Conntrack tracks and NATs both like any SCTP
// association setup; while a raw socket for protocol 132 is open, the
// kernel does not answer the packets with "protocol unreachable" itself.

import (
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"net"
	"net/netip"
	"time"
)

const (
	sctpProto       = 132
	sctpChunkInit   = 1
	sctpChunkAck    = 2
	sctpParamCookie = 7
	sctpCommonLen   = 12
	sctpInitLen     = 20 // chunk header + fixed INIT / INIT ACK fields
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// sctpPacket builds a common header plus one INIT or INIT ACK chunk, with
// the CRC32c checksum conntrack verifies (stored little-endian, as the
// kernel's sctp_compute_cksum does).
func sctpPacket(src, dst uint16, vtag uint32, chunk byte, initTag uint32, cookie []byte) []byte {
	chunkLen := sctpInitLen
	if cookie != nil {
		chunkLen += 4 + len(cookie)
	}
	pkt := make([]byte, sctpCommonLen+(chunkLen+3)&^3)
	binary.BigEndian.PutUint16(pkt[0:], src)
	binary.BigEndian.PutUint16(pkt[2:], dst)
	binary.BigEndian.PutUint32(pkt[4:], vtag)
	c := pkt[sctpCommonLen:]
	c[0] = chunk
	binary.BigEndian.PutUint16(c[2:], uint16(chunkLen))
	binary.BigEndian.PutUint32(c[4:], initTag)
	binary.BigEndian.PutUint32(c[8:], 65536) // advertised receiver window
	binary.BigEndian.PutUint16(c[12:], 1)    // outbound streams
	binary.BigEndian.PutUint16(c[14:], 1)    // inbound streams
	binary.BigEndian.PutUint32(c[16:], initTag)
	if cookie != nil {
		binary.BigEndian.PutUint16(c[20:], sctpParamCookie)
		binary.BigEndian.PutUint16(c[22:], uint16(4+len(cookie)))
		copy(c[24:], cookie)
	}
	binary.LittleEndian.PutUint32(pkt[8:], crc32.Checksum(pkt, castagnoli))
	return pkt
}

// sctpHeader is the part of a received packet the echo protocol uses.
type sctpHeader struct {
	src, dst uint16
	vtag     uint32
	chunk    byte
	initTag  uint32
	cookie   []byte
}

func parseSCTP(pkt []byte) (h sctpHeader, ok bool) {
	if len(pkt) < sctpCommonLen+sctpInitLen {
		return h, false
	}
	h.src = binary.BigEndian.Uint16(pkt[0:])
	h.dst = binary.BigEndian.Uint16(pkt[2:])
	h.vtag = binary.BigEndian.Uint32(pkt[4:])
	c := pkt[sctpCommonLen:]
	h.chunk = c[0]
	h.initTag = binary.BigEndian.Uint32(c[4:])
	if len(c) >= sctpInitLen+4 && binary.BigEndian.Uint16(c[20:]) == sctpParamCookie {
		n := int(binary.BigEndian.Uint16(c[22:]))
		if n >= 4 && sctpInitLen+n <= len(c) {
			h.cookie = c[24 : 20+n]
		}
	}
	return h, true
}

func rawNetwork(a netip.Addr) string {
	if a.Is4() {
		return fmt.Sprintf("ip4:%d", sctpProto)
	}
	return fmt.Sprintf("ip6:%d", sctpProto)
}

// serveSCTP listens with one raw socket per family and answers every INIT
// addressed to the server's port.
func (ns *NS) serveSCTP(s *Server) error {
	var conns []*net.IPConn
	for _, network := range []string{rawNetwork(netip.IPv4Unspecified()), rawNetwork(netip.IPv6Unspecified())} {
		var c *net.IPConn
		if err := ns.Do(func() (err error) { c, err = net.ListenIP(network, nil); return err }); err != nil {
			for _, c := range conns {
				c.Close()
			}
			return fmt.Errorf("raw socket %s: %w", network, err)
		}
		conns = append(conns, c)
	}
	s.close = func() error {
		var errs []error
		for _, c := range conns {
			errs = append(errs, c.Close())
		}
		return errors.Join(errs...)
	}
	for _, c := range conns {
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			answerSCTP(s, c)
		}()
	}
	return nil
}

func answerSCTP(s *Server, c *net.IPConn) {
	buf := make([]byte, 1500)
	for {
		n, from, err := c.ReadFromIP(buf) // the IPv4 header is stripped by Go
		if errors.Is(err, net.ErrClosed) {
			return
		}
		h, ok := parseSCTP(buf[:n])
		if err != nil || !ok || h.chunk != sctpChunkInit || h.dst != s.Port {
			continue
		}
		peerIP, _ := netip.AddrFromSlice(from.IP)
		peer := netip.AddrPortFrom(peerIP.Unmap(), h.src)
		myTag := randomTag()
		cookie := []byte(formatAnswer(s.Name, peer))
		reply := sctpPacket(h.dst, h.src, h.initTag, sctpChunkAck, myTag, cookie)
		_, _ = c.WriteToIP(reply, from)
	}
}

func (c Client) askSCTP(dst netip.AddrPort) (Answer, error) {
	local := &net.IPAddr{}
	if c.Source.IsValid() {
		local.IP = c.Source.AsSlice()
	}
	var conn *net.IPConn
	err := c.NS.Do(func() (err error) {
		conn, err = net.ListenIP(rawNetwork(dst.Addr()), local)
		return err
	})
	if err != nil {
		return Answer{}, fmt.Errorf("raw sctp socket in %s: %w", c.NS.Role, err)
	}
	defer conn.Close()

	srcPort := c.SourcePort
	if srcPort == 0 {
		srcPort = nextRequestPort() // raw socket: no port to bind, none taken
	}
	tag := randomTag()
	init := sctpPacket(srcPort, dst.Port(), 0, sctpChunkInit, tag, nil)
	if _, err := conn.WriteToIP(init, &net.IPAddr{IP: dst.Addr().AsSlice()}); err != nil {
		return Answer{}, fmt.Errorf("sctp INIT to %s: %w", dst, err)
	}
	if err := conn.SetReadDeadline(time.Now().Add(c.timeout())); err != nil {
		return Answer{}, fmt.Errorf("set deadline: %w", err)
	}
	buf := make([]byte, 1500)
	for {
		n, _, err := conn.ReadFromIP(buf)
		if err != nil {
			return Answer{}, fmt.Errorf("sctp INIT ACK from %s: %w", dst, err)
		}
		h, ok := parseSCTP(buf[:n])
		if ok && h.chunk == sctpChunkAck && h.vtag == tag && h.src == dst.Port() && h.dst == srcPort {
			return parseAnswer(string(h.cookie))
		}
	}
}

func randomTag() uint32 {
	var b [4]byte
	_, _ = rand.Read(b[:])
	if v := binary.BigEndian.Uint32(b[:]); v != 0 {
		return v
	}
	return 1 // INIT tags must be non-zero
}
