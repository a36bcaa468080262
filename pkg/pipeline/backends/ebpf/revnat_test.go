package ebpf

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/svcproxy/svcproxy/pkg/kconntrack"
	"github.com/svcproxy/svcproxy/pkg/proxy"
)

// runEvict holds one TCP connection to dst and asks over it, then makes up
// to others more connections to dst, then asks over the first again; each
// ask prints the line runClient would, its peer from getpeername. The
// kernel's LRU evicts in batches and spares what was used lately, so how
// many connections push a record out varies: every evictBatch of them it
// asks once more, unprinted, and stops early once the peer changed.
func runEvict(dst, others string) int {
	n, err := strconv.Atoi(others)
	if err != nil {
		fmt.Println("err " + reason(err))
		return 0
	}
	c, err := net.DialTimeout("tcp", dst, 2*time.Second)
	if err != nil {
		fmt.Println("err " + reason(err))
		return 0
	}
	defer c.Close()
	in := bufio.NewReader(c)
	ask := func() string {
		line, err := askOver(c.(*net.TCPConn), in)
		if err != nil {
			line = "err " + reason(err)
		}
		return line
	}
	first := ask()
	fmt.Println(first)
	last := first
	for i := 1; i <= n; i++ {
		if _, err := askTCP(dst); err != nil {
			fmt.Println("err " + reason(err))
			return 0
		}
		if i%evictBatch == 0 || i == n {
			if last = ask(); peerOf(last) != peerOf(first) {
				break
			}
		}
	}
	fmt.Println(last)
	return 0
}

// evictBatch is how many connections runEvict makes between two looks.
const evictBatch = 32

// peerOf is the peer a runClient line names (its last field).
func peerOf(line string) string {
	f := strings.Fields(line)
	if len(f) == 0 {
		return ""
	}
	return f[len(f)-1]
}

func askOver(c *net.TCPConn, in *bufio.Reader) (string, error) {
	_ = c.SetDeadline(time.Now().Add(2 * time.Second))
	if _, err := c.Write([]byte("hello\n")); err != nil {
		return "", err
	}
	answer, err := in.ReadString('\n')
	if err != nil {
		return "", err
	}
	peer, err := getpeername(c)
	if err != nil {
		return "", err
	}
	return strings.TrimSpace(answer) + " " + peer.String(), nil
}

// TestKernelSocketsBeyondTheBound: the reverse translation map remembers
// Options.SocketEntries sockets. A connection whose record the LRU evicted
// (more translated sockets since) still talks to its endpoint, but
// getpeername shows the endpoint's address instead of the Service's; the
// map's fill is counted. A restart with a larger bound keeps the records
// and remembers as many more sockets.
func TestKernelSocketsBeyondTheBound(t *testing.T) {
	r := newRig(t)
	r.serve(t, proxy.TCP, 8081, "ep1")
	const bound = 32
	st := stateOf(proxy.IPv4, svc("web", proxy.TCP, vip4, 80, eps(srvIP4, 8081)...))
	p, err := New(proxy.IPv4, Options{PinDir: r.pins, Cgroup: r.cgroup, SocketEntries: bound})
	must(t, err)
	t.Cleanup(func() { must(t, p.Cleanup(context.Background())) })
	sync(t, p, st, proxy.RecoverySync)
	front, ep := netip.AddrPortFrom(vip4, 80), netip.AddrPortFrom(srvIP4, 8081)

	// Within the bound the held connection keeps its record.
	got := r.start(t, "evict", front, bound/4)()
	t.Logf("held connection, %d others: %+v", bound/4, got)
	if len(got) != 2 || got[0].Peer != front || got[1].Peer != front {
		t.Errorf("a connection with %d others since shows %+v, want the Service's address %s twice", bound/4, got, front)
	}
	n, capacity, ok, err := p.Sockets().Remembered()
	t.Logf("remembered: %d of %d (%v, %v)", n, capacity, ok, err)
	if err != nil || !ok || capacity != bound || n == 0 || n > bound {
		t.Errorf("Remembered() = %d, %d, %v, %v; want between 1 and %d of %d", n, capacity, ok, err, bound, bound)
	}

	// Past it, the held connection still answers, from the endpoint, once
	// the LRU evicted its record (how many others that takes varies).
	got = r.start(t, "evict", front, 64*bound)()
	t.Logf("held connection, up to %d others: %+v", 64*bound, got)
	if len(got) != 2 || got[0].Peer != front || got[1].Server != "ep1" || got[1].Peer != ep {
		t.Errorf("a connection with up to %d others since shows %+v, want the Service's address, then ep1 at its own address %s",
			64*bound, got, ep)
	}
	before, _, _, _ := p.Sockets().Remembered()
	if before > bound {
		t.Errorf("%d sockets remembered, bound %d", before, bound)
	}

	// A restart with another bound keeps what was remembered, in a map
	// of the new size that the programs use. The socket iterator kept
	// over the old map (where the kernel loads it) is loaded again over
	// the new one.
	s := p.Sockets()
	must(t, s.List(context.Background(), proxy.IPv4, func(kconntrack.Flow) {}))
	q, err := New(proxy.IPv4, Options{PinDir: r.pins, Cgroup: r.cgroup, SocketEntries: 2 * bound})
	must(t, err)
	t.Cleanup(q.Close)
	sync(t, q, st, proxy.RecoverySync)
	old := s.revnat
	must(t, s.List(context.Background(), proxy.IPv4, func(kconntrack.Flow) {}))
	if socketDestroyKernel(t) && (old == 0 || s.revnat == old) {
		t.Errorf("after the map was replaced, the socket iterator runs over map %d, before over %d", s.revnat, old)
	}
	p.Close()
	after, capacity, _, err := q.Sockets().Remembered()
	t.Logf("after a restart with a bound of %d: %d remembered of %d before (%v)", 2*bound, after, before, err)
	if err != nil || after != before || capacity != 2*bound {
		t.Errorf("after a restart with a bound of %d: %d of %d remembered (%v), want the %d from before", 2*bound, after, capacity, err, before)
	}
	got = r.start(t, "evict", front, bound)()
	if len(got) != 2 || got[0].Peer != front || got[1].Peer != front {
		t.Errorf("after the restart, a connection with %d others since shows %+v, want the Service's address %s twice", bound, got, front)
	}
}
