package localnodeport

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"sync"
	"syscall"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"

	"github.com/svcproxy/svcproxy/internal/metrics"
	"github.com/svcproxy/svcproxy/pkg/proxy"
)

// failingListener fails every Accept as a process out of file descriptors
// does, unless a connection is queued, and reports each call on calls
// (unbuffered: the accept loop cannot run ahead of the test).
type failingListener struct {
	calls  chan struct{}
	queued chan net.Conn
	closed chan struct{}
	once   sync.Once
}

func newFailingListener() *failingListener {
	return &failingListener{calls: make(chan struct{}), queued: make(chan net.Conn, 1), closed: make(chan struct{})}
}

func (f *failingListener) Accept() (net.Conn, error) {
	select {
	case f.calls <- struct{}{}:
	case <-f.closed:
		return nil, net.ErrClosed
	}
	select {
	case c := <-f.queued:
		return c, nil
	default:
		return nil, &net.OpError{Op: "accept", Net: "tcp", Err: os.NewSyscallError("accept4", syscall.EMFILE)}
	}
}

func (f *failingListener) Close() error {
	f.once.Do(func() { close(f.closed) })
	return nil
}

func (f *failingListener) Addr() net.Addr { return &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 1} }

func (f *failingListener) nextAccept(t *testing.T) {
	t.Helper()
	select {
	case <-f.calls:
	case <-time.After(5 * time.Second):
		t.Fatal("no Accept call")
	}
}

// retriesAfter checks that the accept loop waits d on the clock, no less,
// before its next Accept.
func (f *failingListener) retriesAfter(t *testing.T, clk *clocktesting.FakeClock, d time.Duration) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for clk.Waiters() == 0 {
		select {
		case <-f.calls:
			t.Fatalf("Accept retried at once after a failure, want a wait of %v", d)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("no wait after a failed Accept, want %v", d)
		}
		time.Sleep(time.Millisecond)
	}
	clk.Step(d - time.Millisecond)
	if clk.Waiters() == 0 {
		t.Fatalf("the accept loop waited less than %v", d)
	}
	clk.Step(time.Millisecond)
	f.nextAccept(t)
}

// TestAcceptBacksOff: failed accepts are retried after 5 ms, doubling to
// 1 s, and the first success starts over from 5 ms.
func TestAcceptBacksOff(t *testing.T) {
	p, clk := newTestProxy(t, proxy.IPv4)
	fl := newFailingListener()
	p.listen = func(string, string) (net.Listener, error) { return fl, nil }
	p.dial = func(context.Context, string, string) (net.Conn, error) { return nil, errors.New("no endpoint here") }
	p.Sync([]Spec{{Port: 30000, Endpoints: []netip.AddrPort{netip.MustParseAddrPort("127.0.0.1:1")}}})
	fl.nextAccept(t)
	for _, ms := range []time.Duration{5, 10, 20, 40, 80, 160, 320, 640, 1000, 1000} {
		fl.retriesAfter(t, clk, ms*time.Millisecond)
	}
	client, server := net.Pipe()
	defer client.Close()
	fl.queued <- server
	fl.retriesAfter(t, clk, time.Second) // this Accept succeeds
	fl.nextAccept(t)                     // so the next one comes at once
	fl.retriesAfter(t, clk, 5*time.Millisecond)
}

// open connects to a port of the proxy and reads the endpoint's greeting;
// an error when the proxy does not serve the connection.
func open(t *testing.T, port uint16) (net.Conn, *bufio.Reader, error) {
	t.Helper()
	c, err := net.DialTimeout("tcp", netip.AddrPortFrom(lo4, port).String(), 2*time.Second)
	if err != nil {
		return nil, nil, err
	}
	t.Cleanup(func() { _ = c.Close() })
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	r := bufio.NewReader(c)
	if _, err := r.ReadString('\n'); err != nil {
		return nil, nil, err
	}
	_ = c.SetDeadline(time.Time{})
	return c, r, nil
}

func mustOpen(t *testing.T, port uint16) (net.Conn, *bufio.Reader) {
	t.Helper()
	c, r, err := open(t, port)
	if err != nil {
		t.Fatalf("connecting to port %d: %v", port, err)
	}
	return c, r
}

// echo checks that c still carries data both ways.
func echo(c net.Conn, r *bufio.Reader) error {
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	defer c.SetDeadline(time.Time{}) //nolint:errcheck // best effort
	if _, err := fmt.Fprintf(c, "ping\n"); err != nil {
		return err
	}
	line, err := r.ReadString('\n')
	if err == nil && line != "ping\n" {
		err = fmt.Errorf("echo %q, want ping", line)
	}
	return err
}

// waitFor polls cond for up to 5 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); !cond(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("waited 5s for %s", what)
		}
	}
}

func refusedCount(t *testing.T, reason string) float64 {
	t.Helper()
	return value(t, metrics.LocalhostNodePortRefusedConnectionsTotal.WithLabelValues("IPv4", reason))
}

// TestConnectionCaps: past its port's cap or the proxy's, a connection is
// reset and counted; a closed connection frees its slot.
func TestConnectionCaps(t *testing.T) {
	p, _ := newBoundedTestProxy(t, proxy.IPv4, Options{MaxConnections: 3, MaxConnectionsPerPort: 2})
	a := backend(t, lo4, "a")
	portA, portB := freePort(t, lo4), freePort(t, lo4)
	p.Sync([]Spec{{Port: portA, Endpoints: []netip.AddrPort{a}}, {Port: portB, Endpoints: []netip.AddrPort{a}}})
	portBefore, totalBefore := refusedCount(t, metrics.RefusedPortLimit), refusedCount(t, metrics.RefusedLimit)
	first, _ := mustOpen(t, portA)
	mustOpen(t, portA)
	if _, _, err := open(t, portA); err == nil {
		t.Error("a third connection to a port capped at two was served")
	}
	mustOpen(t, portB)
	if _, _, err := open(t, portB); err == nil {
		t.Error("a fourth connection to a proxy capped at three was served")
	}
	if got := refusedCount(t, metrics.RefusedPortLimit) - portBefore; got != 1 {
		t.Errorf("refused at the port's cap +%v, want +1", got)
	}
	if got := refusedCount(t, metrics.RefusedLimit) - totalBefore; got != 1 {
		t.Errorf("refused at the proxy's cap +%v, want +1", got)
	}
	_ = first.Close()
	waitFor(t, "a connection to be served once another closed", func() bool {
		_, _, err := open(t, portB)
		return err == nil
	})
}

// TestIdleConnectionsClose: a connection that carried nothing either way
// for the idle timeout is closed; traffic restarts the count.
func TestIdleConnectionsClose(t *testing.T) {
	p, clk := newBoundedTestProxy(t, proxy.IPv4, Options{IdleTimeout: time.Minute})
	port := freePort(t, lo4)
	p.Sync([]Spec{{Port: port, Endpoints: []netip.AddrPort{backend(t, lo4, "a")}}})
	c, r := mustOpen(t, port)
	waitFor(t, "the connection's idle timer", func() bool { return clk.Waiters() == 1 })
	clk.Step(59 * time.Second)
	if err := echo(c, r); err != nil {
		t.Fatalf("before the idle timeout: %v", err)
	}
	clk.Step(2 * time.Second) // past the first deadline, but busy 2s ago
	waitFor(t, "the idle timer to be set again", func() bool { return clk.Waiters() == 1 })
	if err := echo(c, r); err != nil {
		t.Fatalf("a connection busy within the idle timeout was closed: %v", err)
	}
	clk.Step(time.Minute)
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := r.ReadByte(); err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("an idle connection stayed open: %v", err)
	}
}

// TestEmptyEndpointsGrace: a port whose endpoints all go keeps its
// listener and open connections for the grace period, resetting new
// connections; endpoints back in time keep it for good; still none when
// the grace ends, and the listener and its connections go.
func TestEmptyEndpointsGrace(t *testing.T) {
	p, clk := newBoundedTestProxy(t, proxy.IPv4, Options{EmptyGrace: 30 * time.Second})
	port := freePort(t, lo4)
	withEndpoint := []Spec{{Port: port, Endpoints: []netip.AddrPort{backend(t, lo4, "a")}}}
	empty := []Spec{{Port: port}}
	p.Sync(withEndpoint)
	c, r := mustOpen(t, port)
	refusedBefore := refusedCount(t, metrics.RefusedNoEndpoints)
	p.Sync(empty)
	if err := echo(c, r); err != nil {
		t.Fatalf("an open connection was cut when the port's endpoints went: %v", err)
	}
	if _, _, err := open(t, port); err == nil {
		t.Error("a new connection was served while the port had no endpoints")
	}
	if got := refusedCount(t, metrics.RefusedNoEndpoints) - refusedBefore; got != 1 {
		t.Errorf("refused for no endpoints +%v, want +1", got)
	}
	clk.Step(29 * time.Second)
	p.Sync(withEndpoint)
	clk.Step(time.Minute) // the grace stopped: nothing ends
	if _, _, err := open(t, port); err != nil {
		t.Errorf("endpoints back within the grace: %v", err)
	}
	if err := echo(c, r); err != nil {
		t.Errorf("endpoints back within the grace, the open connection: %v", err)
	}
	p.Sync(empty)
	clk.Step(30 * time.Second)
	waitFor(t, "the listener to close after the grace", func() bool { return len(p.Ports()) == 0 })
	if _, _, err := open(t, port); !errors.Is(err, syscall.ECONNREFUSED) {
		t.Errorf("after the grace: %v, want connection refused", err)
	}
	if err := echo(c, r); err == nil {
		t.Error("after the grace the open connection still works")
	}
}
