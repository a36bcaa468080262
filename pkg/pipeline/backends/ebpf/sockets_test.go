package ebpf

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/netip"
	"os"
	"os/exec"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/svcproxy/svcproxy/pkg/kconntrack"
	"github.com/svcproxy/svcproxy/pkg/proxy"
)

// TestKernelSocketsDestroy: a client in the cgroup holds a connected UDP
// socket to each of two Services and a TCP connection to a third. List
// shows the two UDP sockets as flows from their frontends to their
// endpoints, and not the TCP connection. When one UDP Service's endpoint
// is replaced, Delete of its flow destroys that socket alone: its next
// exchange fails, while the other UDP socket and the TCP connection still
// answer, and a new socket reaches the new endpoint.
func TestKernelSocketsDestroy(t *testing.T) {
	for _, f := range []struct {
		family          proxy.IPFamily
		vip, srv, local netip.Addr
	}{{proxy.IPv4, vip4, srvIP4, cliIP4}, {proxy.IPv6, vip6, srvIP6, cliIP6}} {
		t.Run(string(f.family), func(t *testing.T) { socketsDestroy(t, f.family, f.vip, f.srv, f.local) })
	}
}

func socketsDestroy(t *testing.T, family proxy.IPFamily, vip, srvIP, cliIP netip.Addr) {
	r := newRig(t)
	r.serve(t, proxy.UDP, 5301, "a1", "b1", "a2")
	r.serve(t, proxy.TCP, 8081, "web1")
	p := r.proxier(t, family)
	a, b, web := netip.AddrPortFrom(vip, 53), netip.AddrPortFrom(vip, 54), netip.AddrPortFrom(vip, 80)
	bSvc, webSvc := svc("b", proxy.UDP, vip, 54, eps(srvIP, 5302)...), svc("web", proxy.TCP, vip, 80, eps(srvIP, 8081)...)
	sync(t, p, stateOf(family, svc("a", proxy.UDP, vip, 53, eps(srvIP, 5301)...), bSvc, webSvc), proxy.RecoverySync)

	ca, cb, cw := r.keep(t, "udp", a), r.keep(t, "udp", b), r.keep(t, "tcp", web)
	for c, want := range map[*keeper]string{ca: "a1", cb: "b1", cw: "web1"} {
		if got := c.ask(t); got.Server != want {
			t.Fatalf("%s: first exchange %+v, want an answer from %s", c.dst, got, want)
		}
	}
	s := p.Sockets()
	flows := list(t, s)
	if !socketDestroyKernel(t) {
		// Below the floor: nothing is listed, and Supported says why.
		if supported, known := s.Supported(); len(flows) != 0 || supported || !known {
			t.Errorf("below kernel 6.5: List found %v, Supported() = %v, %v; want none, false, true", flows, supported, known)
		}
		return
	}
	if len(flows) != 2 {
		t.Fatalf("List found %d sockets, want the 2 connected UDP sockets: %v", len(flows), flows)
	}
	stale, ok := flows[a]
	if !ok || stale.Reply.Src != netip.AddrPortFrom(srvIP, 5301) || flows[b].Reply.Src != netip.AddrPortFrom(srvIP, 5302) {
		t.Fatalf("List found %v, want %s answered by :5301 and %s by :5302", flows, a, b)
	}
	if stale.Orig.Src.Addr() != cliIP || stale.Reply.Dst != stale.Orig.Src {
		t.Errorf("the socket of %s: %v, want the client's address as source and reply destination", a, stale)
	}
	if supported, known := s.Supported(); !supported || !known {
		t.Errorf("Supported() = %v, %v after a List on this kernel, want true, true", supported, known)
	}

	sync(t, p, changed(stateOf(family, svc("a", proxy.UDP, vip, 53, eps(srvIP, 5303)...), bSvc, webSvc)), proxy.PartialSync)
	n, err := s.Delete(context.Background(), family, []kconntrack.Flow{stale})
	must(t, err)
	if n != 1 || s.Destroyed() != 1 {
		t.Errorf("Delete of one flow: %d gone, %d sockets destroyed; want 1 and 1", n, s.Destroyed())
	}
	got := ca.ask(t)
	t.Logf("the destroyed socket's next exchange: %+v", got)
	if got.Err != "aborted" && got.Err != "disconnected" {
		t.Errorf("the destroyed socket's next exchange: %+v, want ECONNABORTED or EDESTADDRREQ", got)
	}
	for c, want := range map[*keeper]string{cb: "b1", cw: "web1"} {
		if got := c.ask(t); got.Server != want {
			t.Errorf("%s: after another socket was destroyed %+v, want an answer from %s", c.dst, got, want)
		}
	}
	if seen := servers(t, r.ask(t, "udp", a, 3), a); seen["a2"] != 3 {
		t.Errorf("new sockets to %s reached %v, want a2", a, seen)
	}
	if left := list(t, s); len(left) != 1 || left[b] != flows[b] {
		t.Errorf("after the destruction List found %v, want only the socket of %s", left, b)
	}
}

// socketDestroyKernel reports whether this kernel is 6.5 or later, the
// floor of socket destruction.
func socketDestroyKernel(t *testing.T) bool {
	var u unix.Utsname
	must(t, unix.Uname(&u))
	release := unix.ByteSliceToString(u.Release[:])
	var major, minor int
	if _, err := fmt.Sscanf(release, "%d.%d", &major, &minor); err != nil {
		t.Fatalf("kernel release %q: %v", release, err)
	}
	return major > 6 || major == 6 && minor >= 5
}

// list returns the flows of s by frontend.
func list(t *testing.T, s *Sockets) map[netip.AddrPort]kconntrack.Flow {
	t.Helper()
	out := map[netip.AddrPort]kconntrack.Flow{}
	must(t, s.List(context.Background(), s.family, func(f kconntrack.Flow) {
		if _, dup := out[f.Orig.Dst]; dup {
			t.Errorf("two sockets to %s", f.Orig.Dst)
		}
		out[f.Orig.Dst] = f
	}))
	return out
}

// keeper is a client process in the cgroup that holds one socket to dst
// and exchanges a line over it whenever asked.
type keeper struct {
	dst string
	in  io.WriteCloser
	out *bufio.Scanner
}

// keep starts a keeper in the client namespace, born in the cgroup; it
// ends with the test.
func (r *rig) keep(t *testing.T, proto string, dst netip.AddrPort) *keeper {
	t.Helper()
	cg, err := os.Open(r.cgroup)
	must(t, err)
	defer cg.Close()
	cmd := exec.Command("nsenter", "--net="+r.cli.Path(), os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), fmt.Sprintf("%s=keep %s %s", clientEnv, proto, dst))
	cmd.SysProcAttr = &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: int(cg.Fd())}
	in, err := cmd.StdinPipe()
	must(t, err)
	out, err := cmd.StdoutPipe()
	must(t, err)
	must(t, cmd.Start())
	t.Cleanup(func() {
		in.Close()
		if err := cmd.Wait(); err != nil {
			t.Errorf("keeper of %s: %v", dst, err)
		}
	})
	return &keeper{dst: dst.String(), in: in, out: bufio.NewScanner(out)}
}

func (k *keeper) ask(t *testing.T) reply {
	t.Helper()
	if _, err := io.WriteString(k.in, "\n"); err != nil {
		t.Fatalf("keeper of %s: %v", k.dst, err)
	}
	if !k.out.Scan() {
		t.Fatalf("keeper of %s ended: %v", k.dst, k.out.Err())
	}
	return parseReplies(t, k.out.Text())[0]
}
