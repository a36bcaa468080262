package localapi

import (
	"context"
	"io"
	"io/fs"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// socketPath is a socket path in a directory that does not exist yet.
func socketPath(t *testing.T) string {
	return filepath.Join(t.TempDir(), "run", "svcproxy.sock")
}

func start(t *testing.T, path string, routes map[string]http.Handler) *Server {
	t.Helper()
	s, err := Start(path, routes)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func text(body string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, body) })
}

// fetch asks path for route and returns the body.
func fetch(path, route string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	body, err := NewClient(path).Get(ctx, route)
	if err != nil {
		return "", err
	}
	defer body.Close()
	b, err := io.ReadAll(body)
	return string(b), err
}

// getBody is fetch that fails the test on an error.
func getBody(t *testing.T, path, route string) string {
	t.Helper()
	b, err := fetch(path, route)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestSocketIsPrivate: the socket is 0600 and its new directory 0700,
// whatever the umask, which would otherwise give a socket 0777 &^ umask.
func TestSocketIsPrivate(t *testing.T) {
	old := syscall.Umask(0)
	defer syscall.Umask(old)
	path := socketPath(t)
	start(t, path, nil)
	fi, err := os.Lstat(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Type() != fs.ModeSocket || fi.Mode().Perm() != 0o600 {
		t.Errorf("socket mode %v, want a socket with 0600", fi.Mode())
	}
	if di, err := os.Stat(filepath.Dir(path)); err != nil || di.Mode().Perm() != 0o700 {
		t.Errorf("directory mode %v (%v), want 0700", di.Mode(), err)
	}
	if left, _ := filepath.Glob(filepath.Join(filepath.Dir(path), ".*")); len(left) != 0 {
		t.Errorf("temporary files left: %v", left)
	}
}

// TestStaleSocketReplaced: a socket left by a killed process is replaced;
// anything else at the path is left alone and refused.
func TestStaleSocketReplaced(t *testing.T) {
	path := socketPath(t)
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		t.Fatal(err)
	}
	stale, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	stale.SetUnlinkOnClose(false)
	stale.Close()
	start(t, path, map[string]http.Handler{"/x": text("fresh")})
	if got := getBody(t, path, "/x"); got != "fresh" {
		t.Errorf("GET /x = %q", got)
	}

	file := filepath.Join(t.TempDir(), "not-a-socket")
	if err := os.WriteFile(file, []byte("keep"), 0o644); err != nil {
		t.Fatal(err)
	}
	if s, err := Start(file, nil); err == nil {
		s.Close()
		t.Fatal("Start replaced a regular file")
	}
	if b, _ := os.ReadFile(file); string(b) != "keep" {
		t.Errorf("the regular file now holds %q", b)
	}
}

// TestCloseRemovesOnlyItsSocket: Close removes the socket, but not one a
// successor put at the same path meanwhile.
func TestCloseRemovesOnlyItsSocket(t *testing.T) {
	path := socketPath(t)
	old, err := Start(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	start(t, path, map[string]http.Handler{"/x": text("successor")})
	if err := old.Close(); err != nil {
		t.Fatal(err)
	}
	if got := getBody(t, path, "/x"); got != "successor" {
		t.Errorf("after the predecessor closed: GET /x = %q", got)
	}

	alone := socketPath(t)
	s, err := Start(alone, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(alone); !os.IsNotExist(err) {
		t.Errorf("socket still there after Close: %v", err)
	}
}

// holdSlot serves /slow, which holds its request until release is closed,
// and /fast; it returns once a request to /slow is being served, with the
// channel that receives its body.
func holdSlot(t *testing.T) (path string, first <-chan string, release chan struct{}) {
	path = socketPath(t)
	entered, release := make(chan struct{}), make(chan struct{})
	slow := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		close(entered)
		<-release
		_, _ = io.WriteString(w, "done")
	})
	start(t, path, map[string]http.Handler{"/slow": slow, "/fast": text("fast")})
	body := make(chan string, 1)
	go func() {
		b, err := fetch(path, "/slow")
		body <- b + errText(err)
	}()
	<-entered
	return path, body, release
}

// TestOneRequestAtATime: while one request is served, another is refused
// at once with 503 and Retry-After, and nothing is queued in the daemon;
// after it, the socket serves again.
func TestOneRequestAtATime(t *testing.T) {
	path, first, release := holdSlot(t)
	// The client's own http.Client: one request, no retry.
	resp, err := NewClient(path).http.Get("http://svcproxy/fast")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") != RetryAfter {
		t.Errorf("second request while the first is served: %s, Retry-After %q; want 503 with %q",
			resp.Status, resp.Header.Get("Retry-After"), RetryAfter)
	}
	close(release)
	if got := <-first; got != "done" {
		t.Errorf("first request: %q", got)
	}
	if got := getBody(t, path, "/fast"); got != "fast" {
		t.Errorf("after the first request: %q", got)
	}
}

// refusals calls on503 after each 503 its transport receives.
type refusals struct {
	rt    http.RoundTripper
	on503 func()
}

func (r refusals) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := r.rt.RoundTrip(req)
	if err == nil && resp.StatusCode == http.StatusServiceUnavailable {
		r.on503()
	}
	return resp, err
}

// TestClientRetriesWhileBusy: the client waits its turn, so two operators'
// commands at once both succeed. The first request is held until the
// second has been refused once.
func TestClientRetriesWhileBusy(t *testing.T) {
	path, first, release := holdSlot(t)
	c := NewClient(path)
	var once sync.Once
	c.http.Transport = refusals{rt: c.http.Transport, on503: func() { once.Do(func() { close(release) }) }}
	body, err := c.Get(context.Background(), "/fast")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(body)
	body.Close()
	if string(b) != "fast" {
		t.Errorf("second request: %q", b)
	}
	if got := <-first; got != "done" {
		t.Errorf("first request: %q", got)
	}
}

func errText(err error) string {
	if err != nil {
		return " " + err.Error()
	}
	return ""
}

func TestClientErrors(t *testing.T) {
	ctx := context.Background()
	if _, err := NewClient(filepath.Join(t.TempDir(), "none.sock")).Get(ctx, "/x"); err == nil || !strings.Contains(err.Error(), "is it running") {
		t.Errorf("no daemon: %v", err)
	}
	path := socketPath(t)
	start(t, path, map[string]http.Handler{"/bad": http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		http.Error(w, "family must be IPv4 or IPv6", http.StatusBadRequest)
	})})
	if _, err := NewClient(path).Get(ctx, "/nope"); err == nil || !strings.Contains(err.Error(), "not found") {
		t.Errorf("unknown route: %v", err)
	}
	if _, err := NewClient(path).Get(ctx, "/bad"); err == nil || !strings.Contains(err.Error(), "family must be") {
		t.Errorf("400: %v", err)
	}
}
