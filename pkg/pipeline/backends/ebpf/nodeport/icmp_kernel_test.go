package nodeport

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/svcproxy/svcproxy/pkg/proxy"
	"github.com/svcproxy/svcproxy/pkg/testing/netnstest"
)

// TestKernelICMPThroughNodePort: real packets through node1's programs,
// which forward to pod-b on node2 (masqueraded) and send pod-a's flows up
// node1's stack. pod-b's link on node2 takes 1000 bytes: a datagram too big
// for it, sent to node1's node port with "don't fragment", brings node2's
// fragmentation needed back to the client's socket (EMSGSIZE, and a path
// MTU of 1000 to the node port); a datagram to a port the endpoint does
// not listen on is refused, the endpoint's port unreachable reaching the
// client's connected socket, whether the endpoint is on another node or
// this one.
func TestKernelICMPThroughNodePort(t *testing.T) {
	r := newRig(t)
	_, err := r.node2.NS.Run(context.Background(), "ip", "link", "set", "veth0", "mtu", "1000")
	must(t, err)
	st := stateOf(r.node1.IPv4, port("big", proxy.UDP, 30090, r.ep(r.podB)),
		port("closed-remote", proxy.UDP, 30091, ep(r.podB.IPv4, 9)), port("closed-local", proxy.UDP, 30092, ep(r.podA.IPv4, 9)))
	p := r.proxier(t, "np")
	r.sync(t, p, st, proxy.RecoverySync)
	for _, np := range []uint16{30091, 30092} {
		if got := r.outcome(proxy.UDP, netip.AddrPortFrom(r.node1.IPv4, np)); got != netnstest.Refused {
			t.Errorf("UDP to node port %d, whose endpoint does not listen: %s, want %s", np, got, netnstest.Refused)
		}
	}
	var mtu int
	must(t, r.client.NS.Do(func() (err error) {
		mtu, err = pathMTU(netip.AddrPortFrom(r.node1.IPv4, 30090), 1200)
		return err
	}))
	if mtu != 1000 {
		t.Errorf("after a datagram too big for the endpoint's link the path MTU to the node port is %d, want 1000", mtu)
	}
}

// pathMTU sends a datagram of size bytes that must not be fragmented to
// dst, expects the error that fragmentation needed (IPv6: packet too big)
// leaves on a connected socket, and returns the path MTU the socket learnt.
func pathMTU(dst netip.AddrPort, size int) (int, error) {
	network, level, discover, do, mtuOpt := "udp4", unix.IPPROTO_IP, unix.IP_MTU_DISCOVER, unix.IP_PMTUDISC_DO, unix.IP_MTU
	if dst.Addr().Is6() {
		network, level, discover, do, mtuOpt = "udp6", unix.IPPROTO_IPV6, unix.IPV6_MTU_DISCOVER, unix.IPV6_PMTUDISC_DO, unix.IPV6_MTU
	}
	conn, err := net.DialUDP(network, nil, net.UDPAddrFromAddrPort(dst))
	if err != nil {
		return 0, err
	}
	defer conn.Close()
	raw, err := conn.SyscallConn()
	if err != nil {
		return 0, err
	}
	var sockErr error
	if err := raw.Control(func(fd uintptr) {
		sockErr = unix.SetsockoptInt(int(fd), level, discover, do)
	}); err != nil || sockErr != nil {
		return 0, errors.Join(err, sockErr)
	}
	if _, err := conn.Write(make([]byte, size)); err != nil {
		return 0, err
	}
	if err := conn.SetReadDeadline(time.Now().Add(2 * time.Second)); err != nil {
		return 0, err
	}
	if _, err := conn.Read(make([]byte, 2048)); !errors.Is(err, syscall.EMSGSIZE) {
		return 0, errors.Join(errors.New("no fragmentation needed came back"), err)
	}
	var mtu int
	if err := raw.Control(func(fd uintptr) {
		mtu, sockErr = unix.GetsockoptInt(int(fd), level, mtuOpt)
	}); err != nil || sockErr != nil {
		return 0, errors.Join(err, sockErr)
	}
	return mtu, nil
}

// TestKernelICMPv6ThroughNodePort is TestKernelICMPThroughNodePort for
// IPv6: pod-b's link on node2 takes 1300 bytes; a datagram of 1400 to
// node1's IPv6 node port brings node2's packet too big back to the
// client's socket (EMSGSIZE, a path MTU of 1300 to the node port); a
// datagram to a port the endpoint does not listen on is refused, remote
// and local endpoint alike (the local one's port unreachable translated at
// egress).
func TestKernelICMPv6ThroughNodePort(t *testing.T) {
	r := newRig(t)
	_, err := r.node2.NS.Run(context.Background(), "ip", "link", "set", "veth0", "mtu", "1300")
	must(t, err)
	st := stateOf6(r.node1.IPv6, port("big", proxy.UDP, 30090, ep(r.podB.IPv6, 8080)),
		port("closed-remote", proxy.UDP, 30091, ep(r.podB.IPv6, 9)), port("closed-local", proxy.UDP, 30092, ep(r.podA.IPv6, 9)))
	p := r.proxier(t, "np")
	r.sync(t, p, st, proxy.RecoverySync)
	for _, np := range []uint16{30091, 30092} {
		if got := r.outcome(proxy.UDP, netip.AddrPortFrom(r.node1.IPv6, np)); got != netnstest.Refused {
			t.Errorf("UDP to IPv6 node port %d, whose endpoint does not listen: %s, want %s", np, got, netnstest.Refused)
		}
	}
	var mtu int
	must(t, r.client.NS.Do(func() (err error) {
		mtu, err = pathMTU(netip.AddrPortFrom(r.node1.IPv6, 30090), 1400)
		return err
	}))
	if mtu != 1300 {
		t.Errorf("after a datagram too big for the endpoint's link the path MTU to the IPv6 node port is %d, want 1300", mtu)
	}
}
