package metrics

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"testing"
	"time"
)

// Each test makes short only the timeout it exercises; the others stay
// long, so a loaded machine cannot make them fire first. closeGuard only
// guards against a hang (a server that never closes), it is not a timing
// assertion.
const (
	short      = 100 * time.Millisecond
	long       = 30 * time.Second
	closeGuard = 20 * time.Second
)

// serveShort runs Serve with timeouts on a free loopback port and
// returns the address once it answers.
func serveShort(t *testing.T, timeouts Timeouts) string {
	t.Helper()
	l := occupy(t)
	addr := l.Addr().String()
	l.Close()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		Serve(ctx, ServeOptions{Name: "metrics", Addr: addr, Timeouts: timeouts,
			Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok") })})
		close(done)
	}()
	t.Cleanup(func() { cancel(); <-done })
	waitFor(t, func() bool {
		c, err := net.Dial("tcp", addr)
		if err == nil {
			c.Close()
		}
		return err == nil
	})
	return addr
}

// expectClosed reads from c until the server closes it.
func expectClosed(t *testing.T, c net.Conn, r io.Reader) {
	t.Helper()
	if err := c.SetReadDeadline(time.Now().Add(closeGuard)); err != nil {
		t.Fatal(err)
	}
	_, err := io.Copy(io.Discard, r)
	if errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("server kept the connection open for %v", closeGuard)
	}
	// nil is EOF: closed. A reset is closed too.
}

func TestServeClosesIdleKeepAliveConnection(t *testing.T) {
	addr := serveShort(t, Timeouts{ReadHeader: long, Read: long, Write: long, Idle: short})
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := io.WriteString(c, "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || string(body) != "ok" || resp.Close {
		t.Fatalf("got %d %q close=%v, want a kept-alive 200 ok", resp.StatusCode, body, resp.Close)
	}
	// Now idle: the server must drop the connection.
	expectClosed(t, c, br)
}

func TestServeClosesPartialRequest(t *testing.T) {
	addr := serveShort(t, Timeouts{ReadHeader: short, Read: long, Write: long, Idle: long})
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	// Slowloris: headers that never end.
	if _, err := io.WriteString(c, "GET /metrics HTTP/1.1\r\nHost: x\r\nX-Slow: "); err != nil {
		t.Fatal(err)
	}
	expectClosed(t, c, c)
}

func TestServerTimeoutsAllSet(t *testing.T) {
	srv := Timeouts{}.NewServer(http.NotFoundHandler())
	for name, d := range map[string]time.Duration{
		"ReadHeaderTimeout": srv.ReadHeaderTimeout, "ReadTimeout": srv.ReadTimeout,
		"WriteTimeout": srv.WriteTimeout, "IdleTimeout": srv.IdleTimeout,
	} {
		if d <= 0 {
			t.Errorf("default %s is %v, want a bound", name, d)
		}
	}
	// pprof's default 30 s CPU profile must still fit under WriteTimeout.
	if srv.WriteTimeout <= 30*time.Second {
		t.Errorf("WriteTimeout %v would refuse pprof's default 30s profile", srv.WriteTimeout)
	}
}
