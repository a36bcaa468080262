package netnstest

import (
	"bufio"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"syscall"
	"time"

	"github.com/svcproxy/svcproxy/pkg/proxy"
)

// DefaultTimeout bounds every client operation unless a Client says
// otherwise: long enough for a loaded 2-core machine, short enough that a
// test expecting a drop does not crawl.
const DefaultTimeout = 2 * time.Second

// Client sends requests from inside a namespace.
type Client struct {
	NS *NS
	// Source, if valid, is the local address to send from (a client
	// namespace may hold several to play allowed and blocked clients).
	Source netip.Addr
	// SourcePort, if non-zero, is the port to send from; zero takes the
	// next of a sequence for UDP and SCTP (see nextRequestPort), and an
	// ephemeral port for TCP.
	SourcePort uint16
	// Timeout bounds connect and reply; zero means DefaultTimeout.
	Timeout time.Duration
	// Cgroup, if set, is a cgroup v2 directory whose socket hooks must see
	// the requests: a child process born there (one per namespace and
	// cgroup, see cgroup.go) makes them. The test binary's TestMain must
	// call ServeChild. DialTCP does not support it.
	Cgroup string
}

func (c Client) timeout() time.Duration {
	if c.Timeout > 0 {
		return c.Timeout
	}
	return DefaultTimeout
}

// Ask opens a fresh connection (TCP), sends one datagram (UDP) or one INIT
// (SCTP) to dst and returns the echo server's answer. Use OutcomeOf on the
// error to tell refused from timed out.
func (c Client) Ask(protocol proxy.Protocol, dst netip.AddrPort) (Answer, error) {
	if c.Cgroup != "" {
		return c.askInCgroup(protocol, dst)
	}
	switch protocol {
	case proxy.TCP:
		conn, err := c.DialTCP(dst)
		if err != nil {
			return Answer{}, err
		}
		defer conn.Close()
		return conn.Ask()
	case proxy.UDP:
		return c.askUDP(dst)
	case proxy.SCTP:
		return c.askSCTP(dst)
	}
	return Answer{}, fmt.Errorf("unknown protocol %q", protocol)
}

// Conn is an open TCP connection to an echo server; it may be used from any
// goroutine (the socket stays in the namespace it was made in).
type Conn struct {
	conn    net.Conn
	reader  *bufio.Reader
	timeout time.Duration
}

// DialTCP connects to dst from inside the client's namespace.
func (c Client) DialTCP(dst netip.AddrPort) (*Conn, error) {
	if c.Cgroup != "" {
		return nil, fmt.Errorf("tcp connect %s from %s: a connection held open from a cgroup's process is not supported", dst, c.NS.Role)
	}
	d := net.Dialer{Timeout: c.timeout()}
	if c.Source.IsValid() || c.SourcePort != 0 {
		d.LocalAddr = &net.TCPAddr{IP: c.Source.AsSlice(), Port: int(c.SourcePort)}
	}
	var conn net.Conn
	err := c.NS.Do(func() (err error) {
		conn, err = d.Dial("tcp", dst.String())
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("tcp connect %s from %s: %w", dst, c.NS.Role, err)
	}
	return &Conn{conn: conn, reader: bufio.NewReader(conn), timeout: c.timeout()}, nil
}

// Ask sends one line on the open connection and reads the answer.
func (c *Conn) Ask() (Answer, error) {
	if err := c.conn.SetDeadline(time.Now().Add(c.timeout)); err != nil {
		return Answer{}, fmt.Errorf("set deadline: %w", err)
	}
	if _, err := c.conn.Write([]byte("hello\n")); err != nil {
		return Answer{}, fmt.Errorf("tcp write to %s: %w", c.conn.RemoteAddr(), err)
	}
	line, err := c.reader.ReadString('\n')
	if err != nil {
		return Answer{}, fmt.Errorf("tcp read from %s: %w", c.conn.RemoteAddr(), err)
	}
	return parseAnswer(line)
}

// LocalAddr is the connection's local address and port.
func (c *Conn) LocalAddr() netip.AddrPort { return addrPortOf(c.conn.LocalAddr()) }

// Close closes the connection.
func (c *Conn) Close() error { return c.conn.Close() }

func (c Client) askUDP(dst netip.AddrPort) (Answer, error) {
	var conn *net.UDPConn
	err := c.NS.Do(func() (err error) {
		conn, err = c.dialUDP(dst)
		return err
	})
	if err != nil {
		return Answer{}, fmt.Errorf("udp socket to %s from %s: %w", dst, c.NS.Role, err)
	}
	defer conn.Close()
	if err := conn.SetDeadline(time.Now().Add(c.timeout())); err != nil {
		return Answer{}, fmt.Errorf("set deadline: %w", err)
	}
	if _, err := conn.Write([]byte("hello\n")); err != nil {
		return Answer{}, fmt.Errorf("udp send to %s: %w", dst, err)
	}
	buf := make([]byte, 1500)
	n, err := conn.Read(buf)
	if err != nil {
		return Answer{}, fmt.Errorf("udp receive from %s: %w", dst, err)
	}
	return parseAnswer(string(buf[:n]))
}

// dialUDP opens a connected UDP socket (an ICMP port unreachable then comes
// back as ECONNREFUSED) from c's source, skipping sequence ports another
// socket in the namespace holds.
func (c Client) dialUDP(dst netip.AddrPort) (*net.UDPConn, error) {
	local := &net.UDPAddr{IP: c.Source.AsSlice(), Port: int(c.SourcePort)}
	for tries := 0; ; tries++ {
		if c.SourcePort == 0 {
			local.Port = int(nextRequestPort())
		}
		conn, err := net.DialUDP("udp", local, net.UDPAddrFromAddrPort(dst))
		if !errors.Is(err, syscall.EADDRINUSE) || c.SourcePort != 0 || tries == 100 {
			return conn, err
		}
	}
}

// Outcome classifies the result of a client operation.
type Outcome string

// Outcomes a test can expect.
const (
	OK          Outcome = "ok"
	Refused     Outcome = "refused"     // ICMP port unreachable / TCP RST
	Timeout     Outcome = "timeout"     // nothing came back: dropped
	Unreachable Outcome = "unreachable" // ICMP host/net unreachable
	Failed      Outcome = "failed"      // anything else
)

// OutcomeOf tells apart the ways a request can fail.
func OutcomeOf(err error) Outcome {
	var netErr net.Error
	switch {
	case err == nil:
		return OK
	case errors.Is(err, syscall.ECONNREFUSED):
		return Refused
	case errors.Is(err, os.ErrDeadlineExceeded), errors.As(err, &netErr) && netErr.Timeout():
		return Timeout
	case errors.Is(err, syscall.EHOSTUNREACH), errors.Is(err, syscall.ENETUNREACH):
		return Unreachable
	}
	return Failed
}
