package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"
)

// askCmd sends requests and prints one line per request, for the Go e2e
// tests to parse (probe prints a report for people instead):
//
//	<ms since start> ok <pod> <client address the pod saw>
//	<ms since start> err <refused|timeout|unreachable|other> <message>
//
// With -n 0 it runs until SIGINT/SIGTERM or -duration, which is how the tests
// keep a steady load running while they break things. With -keep a UDP
// client reuses one socket (one conntrack flow) for every datagram.
func askCmd(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("ask", flag.ContinueOnError)
	url := fs.String("url", "", "HTTP URL to GET (one new connection per request)")
	udp := fs.String("udp", "", "HOST:PORT to send UDP datagrams to")
	n := fs.Int("n", 1, "requests to send; 0 = until signalled or -duration")
	duration := fs.Duration("duration", 5*time.Minute, "stop after this long")
	interval := fs.Duration("interval", 0, "pause between requests")
	timeout := fs.Duration("timeout", 2*time.Second, "per-request timeout")
	keep := fs.Bool("keep", false, "UDP: one socket (one flow) for every datagram")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if (*url == "") == (*udp == "") {
		return fmt.Errorf("exactly one of -url and -udp is required")
	}
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, *duration)
	defer cancel()

	ask := func() (string, error) { return askHTTP(*url, *timeout) }
	if *udp != "" {
		ask = func() (string, error) { return askUDP(*udp, *timeout) }
		if *keep {
			flow, err := newUDPFlow(*udp)
			if err != nil {
				return err
			}
			defer flow.Close()
			ask = func() (string, error) { return flow.ask(*timeout) }
		}
	}
	out := bufio.NewWriter(os.Stdout)
	defer out.Flush()
	start := time.Now()
	for i := 0; *n == 0 || i < *n; i++ {
		if ctx.Err() != nil {
			break
		}
		ans, err := ask()
		ms := time.Since(start).Milliseconds()
		if err != nil {
			fmt.Fprintf(out, "%d err %s %s\n", ms, errKind(err), strings.ReplaceAll(err.Error(), "\n", " "))
		} else {
			pod, src := parseAnswer(ans)
			fmt.Fprintf(out, "%d ok %s %s\n", ms, pod, src)
		}
		if *n == 0 {
			out.Flush() // a killed load generator still leaves its lines
		}
		if *interval > 0 {
			select {
			case <-ctx.Done():
			case <-time.After(*interval):
			}
		}
	}
	return nil
}

// errKind classifies a failed request the way the tests assert on it: a
// REJECT rule gives "refused", a DROP rule "timeout".
func errKind(err error) string {
	var ne net.Error
	switch {
	case errors.Is(err, syscall.ECONNREFUSED):
		return "refused"
	case errors.Is(err, syscall.EHOSTUNREACH), errors.Is(err, syscall.ENETUNREACH):
		return "unreachable"
	case errors.As(err, &ne) && ne.Timeout():
		return "timeout"
	case errors.Is(err, os.ErrDeadlineExceeded):
		return "timeout"
	}
	return "other"
}

// udpFlow is one UDP socket reused for every datagram: the same 5-tuple,
// hence the same conntrack entry, as a long-lived UDP client has. Like
// such a client, it dials again when the kernel destroyed its socket
// (ebpf mode does, when the endpoint it was sent to went away); never on
// a timeout, which must not hide a flow stuck to a dead endpoint.
type udpFlow struct {
	addr string
	conn net.Conn
	buf  []byte
}

func newUDPFlow(addr string) (*udpFlow, error) {
	f := &udpFlow{addr: addr, buf: make([]byte, 2048)}
	return f, f.dial()
}

func (f *udpFlow) dial() error {
	conn, err := net.Dial("udp", f.addr)
	if err != nil {
		return err
	}
	f.conn = conn
	return nil
}

func (f *udpFlow) Close() error { return f.conn.Close() }

func (f *udpFlow) ask(timeout time.Duration) (string, error) {
	ans, err := f.exchange(timeout)
	if errors.Is(err, syscall.ECONNABORTED) || errors.Is(err, syscall.EDESTADDRREQ) {
		f.conn.Close()
		if derr := f.dial(); derr != nil {
			return "", errors.Join(err, derr)
		}
	}
	return ans, err
}

func (f *udpFlow) exchange(timeout time.Duration) (string, error) {
	_ = f.conn.SetDeadline(time.Now().Add(timeout))
	if _, err := f.conn.Write([]byte("who\n")); err != nil {
		return "", err
	}
	k, err := f.conn.Read(f.buf)
	if err != nil {
		return "", err
	}
	return checkAnswer(string(f.buf[:k]))
}
