package ebpf

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/svcproxy/svcproxy/pkg/proxy"
	"github.com/svcproxy/svcproxy/pkg/testing/netnstest"
)

// clientEnv makes the test binary a client: "PROTO DST COUNT". The kernel
// tests start it inside their cgroup, so that only its sockets are
// translated.
const clientEnv = "SVCPROXY_EBPF_CLIENT"

func TestMain(m *testing.M) {
	if spec := os.Getenv(clientEnv); spec != "" {
		os.Exit(runClient(spec))
	}
	os.Exit(m.Run())
}

// runClient asks dst COUNT times and prints one line per try:
// "ok SERVER SEEN-PEER CLIENT-PEER" or "err REASON".
func runClient(spec string) int {
	f := strings.Fields(spec)
	if len(f) == 3 && f[0] == "keep" {
		return runKeep(f[1], f[2])
	}
	if len(f) == 3 && f[0] == "evict" {
		return runEvict(f[1], f[2])
	}
	if len(f) != 3 {
		fmt.Fprintf(os.Stderr, "bad client spec %q\n", spec)
		return 2
	}
	count, err := strconv.Atoi(f[2])
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	if f[0] == "time" {
		return runTimed(f[1], count)
	}
	for range count {
		var line string
		switch f[0] {
		case "udp":
			line, err = askUDP(f[1])
		case "tcp":
			line, err = askTCP(f[1])
		default:
			line, err = askMapped(f[0], netip.MustParseAddrPort(f[1]))
		}
		if err != nil {
			line = "err " + reason(err)
		}
		fmt.Println(line)
	}
	return 0
}

// runKeep dials dst once and, for every line on stdin, asks over that one
// socket and prints the line runClient would.
func runKeep(proto, dst string) int {
	c, err := net.DialTimeout(proto, dst, 2*time.Second)
	if err != nil {
		fmt.Println("err " + reason(err))
		return 0
	}
	defer c.Close()
	buf := make([]byte, 1500)
	for in := bufio.NewScanner(os.Stdin); in.Scan(); {
		line, err := exchange(c, buf)
		if err != nil {
			line = "err " + reason(err)
		}
		fmt.Println(line)
	}
	return 0
}

func exchange(c net.Conn, buf []byte) (string, error) {
	_ = c.SetDeadline(time.Now().Add(2 * time.Second))
	if _, err := c.Write([]byte("hello\n")); err != nil {
		return "", err
	}
	n, err := c.Read(buf)
	if err != nil {
		return "", err
	}
	return strings.TrimSpace(string(buf[:n])) + " " + c.RemoteAddr().String(), nil
}

func reason(err error) string {
	switch {
	case errors.Is(err, syscall.ECONNREFUSED):
		return "refused"
	case errors.Is(err, syscall.ETIMEDOUT):
		return "timeout"
	case errors.Is(err, syscall.ECONNABORTED):
		return "aborted"
	case errors.Is(err, syscall.EDESTADDRREQ):
		return "disconnected"
	}
	return strings.ReplaceAll(err.Error(), " ", "_")
}

func askTCP(dst string) (string, error) {
	c, err := net.DialTimeout("tcp", dst, 2*time.Second)
	if err != nil {
		return "", err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(2 * time.Second))
	peer, err := getpeername(c.(*net.TCPConn))
	if err != nil {
		return "", err
	}
	if _, err := c.Write([]byte("hello\n")); err != nil {
		return "", err
	}
	answer, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return "", err
	}
	return strings.TrimSpace(answer) + " " + peer.String(), nil
}

// getpeername asks the kernel, not Go's cached address.
func getpeername(c *net.TCPConn) (netip.AddrPort, error) {
	rc, err := c.SyscallConn()
	if err != nil {
		return netip.AddrPort{}, err
	}
	var sa unix.Sockaddr
	var serr error
	if err := rc.Control(func(fd uintptr) { sa, serr = unix.Getpeername(int(fd)) }); err != nil {
		return netip.AddrPort{}, err
	}
	switch a := sa.(type) {
	case *unix.SockaddrInet4:
		return netip.AddrPortFrom(netip.AddrFrom4(a.Addr), uint16(a.Port)), serr
	case *unix.SockaddrInet6:
		return netip.AddrPortFrom(netip.AddrFrom16(a.Addr), uint16(a.Port)), serr
	}
	return netip.AddrPort{}, fmt.Errorf("getpeername: %T %v", sa, serr)
}

func askUDP(dst string) (string, error) {
	to, err := net.ResolveUDPAddr("udp", dst)
	if err != nil {
		return "", err
	}
	network := "udp4"
	if to.IP.To4() == nil {
		network = "udp6"
	}
	pc, err := net.ListenUDP(network, nil)
	if err != nil {
		return "", err
	}
	defer pc.Close()
	_ = pc.SetDeadline(time.Now().Add(2 * time.Second))
	if _, err := pc.WriteToUDP([]byte("hello\n"), to); err != nil {
		return "", err
	}
	buf := make([]byte, 1500)
	n, from, err := pc.ReadFromUDPAddrPort(buf)
	if err != nil {
		return "", err
	}
	return strings.TrimSpace(string(buf[:n])) + " " + netip.AddrPortFrom(from.Addr().Unmap(), from.Port()).String(), nil
}

// reply is one line of a client's output.
type reply struct {
	Server string // the echo server's name, "" on error
	Seen   string // the client address the server saw
	Peer   netip.AddrPort
	Err    string
}

// rig is a throwaway bpffs, a child of a throwaway cgroup2 mount, and a
// client and a server namespace joined by a veth.
type rig struct {
	pins   string
	cgroup string
	cli    *netnstest.NS
	srv    *netnstest.NS
}

var (
	cliIP4 = netip.MustParseAddr("198.18.0.1")
	srvIP4 = netip.MustParseAddr("198.18.0.2")
	cliIP6 = netip.MustParseAddr("fd00:18::1")
	srvIP6 = netip.MustParseAddr("fd00:18::2")
)

func newRig(t testing.TB) *rig {
	netnstest.RequireKernel(t, "nsenter")
	r := &rig{pins: netnstest.MountThrowaway(t, "bpf"), cgroup: netnstest.ThrowawayCgroup(t, "svcproxy-ebpf-test")}
	lab := netnstest.New(t)
	var err error
	if r.cli, err = lab.NewNS("cli"); err != nil {
		t.Fatal(err)
	}
	if r.srv, err = lab.NewNS("srv"); err != nil {
		t.Fatal(err)
	}
	must(t, netnstest.Veth(r.cli, "c0", r.srv, "s0"))
	for _, a := range []struct {
		ns  *netnstest.NS
		dev string
		ip  netip.Addr
	}{{r.cli, "c0", cliIP4}, {r.srv, "s0", srvIP4}, {r.cli, "c0", cliIP6}, {r.srv, "s0", srvIP6}} {
		must(t, a.ns.AddAddr(a.dev, netip.PrefixFrom(a.ip, a.ip.BitLen()-8)))
	}
	return r
}

// serve starts echo servers in the server namespace, one per name, on
// consecutive ports from base, for proto.
func (r *rig) serve(t testing.TB, proto proxy.Protocol, base uint16, names ...string) {
	for i, n := range names {
		if _, err := r.srv.Serve(n, proto, base+uint16(i)); err != nil {
			t.Fatal(err)
		}
	}
}

// ask runs a client process in the cgroup and the client namespace.
func (r *rig) ask(t testing.TB, proto string, dst netip.AddrPort, count int) []reply {
	t.Helper()
	return r.start(t, proto, dst, count)()
}

// start starts what ask runs and returns the wait for its replies.
func (r *rig) start(t testing.TB, proto string, dst netip.AddrPort, count int) func() []reply {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	cmd := netnstest.TestBinaryIn(ctx, r.cli, fmt.Sprintf("%s=%s %s %d", clientEnv, proto, dst, count))
	var out strings.Builder
	cmd.Stdout = &out
	if err := netnstest.StartInCgroup(cmd, r.cgroup); err != nil {
		cancel()
		t.Fatalf("client: %v", err)
	}
	return func() []reply {
		t.Helper()
		defer cancel()
		if err := cmd.Wait(); err != nil {
			t.Fatalf("client: %v", err)
		}
		return parseReplies(t, out.String())
	}
}

func parseReplies(t testing.TB, out string) []reply {
	t.Helper()
	var replies []reply
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		f := strings.Fields(line)
		switch {
		case len(f) == 2 && f[0] == "err":
			replies = append(replies, reply{Err: f[1]})
		case len(f) == 3:
			replies = append(replies, reply{Server: f[0], Seen: f[1], Peer: netip.MustParseAddrPort(f[2])})
		default:
			t.Fatalf("client printed %q", line)
		}
	}
	return replies
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
