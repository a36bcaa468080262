package ebpf

import (
	"fmt"
	"net/netip"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// askMapped asks dst, an IPv4-mapped IPv6 address, from an AF_INET6 socket
// that accepts such addresses (IPV6_V6ONLY off), as a dual-stack
// application reaches an IPv4 Service. how is "tcp6" (connect, then the
// peer from getpeername), "udp6" (sendto, then the reply's source from
// recvfrom) or "udp6c" (connect, send, then the reply's source). Go's
// net package dials such addresses from an AF_INET socket, so this
// speaks to the kernel directly.
func askMapped(how string, dst netip.AddrPort) (string, error) {
	typ := unix.SOCK_DGRAM
	if how == "tcp6" {
		typ = unix.SOCK_STREAM
	}
	fd, err := unix.Socket(unix.AF_INET6, typ|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return "", err
	}
	defer unix.Close(fd)
	tv := unix.NsecToTimeval((2 * time.Second).Nanoseconds())
	for _, opt := range []error{
		unix.SetsockoptInt(fd, unix.IPPROTO_IPV6, unix.IPV6_V6ONLY, 0),
		unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv),
		unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_SNDTIMEO, &tv),
	} {
		if opt != nil {
			return "", opt
		}
	}
	to := &unix.SockaddrInet6{Port: int(dst.Port()), Addr: dst.Addr().As16()}
	hello := []byte("hello\n")
	if how == "udp6" {
		err = unix.Sendto(fd, hello, 0, to)
	} else if err = unix.Connect(fd, to); err == nil {
		_, err = unix.Write(fd, hello)
	}
	if err != nil {
		return "", err
	}
	buf := make([]byte, 1500)
	n, from, err := unix.Recvfrom(fd, buf, 0)
	if err != nil {
		return "", err
	}
	if how != "udp6" {
		if from, err = unix.Getpeername(fd); err != nil {
			return "", err
		}
	}
	peer, ok := from.(*unix.SockaddrInet6)
	if !ok {
		return "", fmt.Errorf("the peer is %T, want an IPv6 address", from)
	}
	return strings.TrimSpace(string(buf[:n])) + " " + netip.AddrPortFrom(netip.AddrFrom16(peer.Addr), uint16(peer.Port)).String(), nil
}
