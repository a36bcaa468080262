package servicehealth

import (
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/svcproxy/svcproxy/internal/metrics"
	"github.com/svcproxy/svcproxy/pkg/pipeline/desired"
	"github.com/svcproxy/svcproxy/pkg/proxy"
)

var (
	loopback4 = desired.NodePortAddrs{IPs: []netip.Addr{netip.MustParseAddr("127.0.0.1")}}
	svcA      = proxy.ServiceName{Namespace: "ns", Name: "a"}
	svcB      = proxy.ServiceName{Namespace: "ns", Name: "b"}
)

// freePort returns a loopback TCP port that was free a moment ago.
func freePort(t *testing.T, network, host string) uint16 {
	t.Helper()
	l, err := net.Listen(network, net.JoinHostPort(host, "0"))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return uint16(l.Addr().(*net.TCPAddr).Port)
}

type recorder struct {
	mu     sync.Mutex
	errors map[proxy.ServiceName]error
}

func (r *recorder) record(svc proxy.ServiceName, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.errors[svc] = err
}

func newServer(t *testing.T, healthy *atomic.Bool) (*Server, *recorder) {
	t.Helper()
	rec := &recorder{errors: map[proxy.ServiceName]error{}}
	s := New(healthy.Load, rec.record)
	t.Cleanup(s.Close)
	return s, rec
}

type probe struct {
	code   int
	weight string
	ctype  string
	body   body
}

func probeAt(t *testing.T, host string, port uint16, path string) (probe, error) {
	t.Helper()
	resp, err := http.Get("http://" + net.JoinHostPort(host, strconv.Itoa(int(port))) + path)
	if err != nil {
		return probe{}, err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	p := probe{code: resp.StatusCode, weight: resp.Header.Get("X-Load-Balancing-Endpoint-Weight"), ctype: resp.Header.Get("Content-Type")}
	if err := json.Unmarshal(raw, &p.body); err != nil {
		t.Fatalf("body %q: %v", raw, err)
	}
	return p, nil
}

func mustProbe(t *testing.T, port uint16) probe {
	t.Helper()
	p, err := probeAt(t, "127.0.0.1", port, "/any/path")
	if err != nil {
		t.Fatalf("probe :%d: %v", port, err)
	}
	return p
}

func TestAnswersWithLocalEndpointCountAndProxyHealth(t *testing.T) {
	var healthy atomic.Bool
	healthy.Store(true)
	s, _ := newServer(t, &healthy)
	port := freePort(t, "tcp4", "127.0.0.1")
	s.Sync(loopback4, proxy.IPv4, []desired.HealthCheck{{Service: svcA, Port: port, LocalReady: 2}})

	p := mustProbe(t, port)
	want := body{Service: serviceRef{"ns", "a"}, LocalEndpoints: 2, ServiceProxyHealthy: true}
	if p.code != 200 || p.weight != "2" || p.ctype != "application/json" || p.body != want {
		t.Fatalf("probe = %+v", p)
	}

	// The proxy turns unhealthy: 503 although endpoints exist.
	healthy.Store(false)
	p = mustProbe(t, port)
	if p.code != 503 || p.body.ServiceProxyHealthy || p.body.LocalEndpoints != 2 {
		t.Fatalf("unhealthy proxy: %+v", p)
	}
	healthy.Store(true)

	// No ready local endpoint: 503, weight 0, same listener.
	s.Sync(loopback4, proxy.IPv4, []desired.HealthCheck{{Service: svcA, Port: port, LocalReady: 0}})
	p = mustProbe(t, port)
	if p.code != 503 || p.weight != "0" || !p.body.ServiceProxyHealthy {
		t.Fatalf("no endpoints: %+v", p)
	}
}

func TestOpensMovesAndClosesListeners(t *testing.T) {
	var healthy atomic.Bool
	healthy.Store(true)
	s, _ := newServer(t, &healthy)
	portA, portB, portA2 := freePort(t, "tcp4", "127.0.0.1"), freePort(t, "tcp4", "127.0.0.1"), freePort(t, "tcp4", "127.0.0.1")
	s.Sync(loopback4, proxy.IPv4, []desired.HealthCheck{
		{Service: svcA, Port: portA, LocalReady: 1},
		{Service: svcB, Port: portB, LocalReady: 3},
	})
	if p := mustProbe(t, portB); p.body.Service.Name != "b" || p.weight != "3" {
		t.Fatalf("b: %+v", p)
	}

	// a moves to another port, b goes away.
	s.Sync(loopback4, proxy.IPv4, []desired.HealthCheck{{Service: svcA, Port: portA2, LocalReady: 1}})
	if p := mustProbe(t, portA2); p.body.Service.Name != "a" {
		t.Fatalf("a on new port: %+v", p)
	}
	for _, port := range []uint16{portA, portB} {
		if _, err := probeAt(t, "127.0.0.1", port, "/"); err == nil {
			t.Errorf("port %d still answers after its service left", port)
		}
	}
}

func TestFamiliesAreIndependent(t *testing.T) {
	var healthy atomic.Bool
	healthy.Store(true)
	s, _ := newServer(t, &healthy)
	port := freePort(t, "tcp4", "127.0.0.1")
	s.Sync(loopback4, proxy.IPv4, []desired.HealthCheck{{Service: svcA, Port: port, LocalReady: 1}})
	// An IPv6 sync with no checks must not close IPv4's servers.
	s.Sync(desired.NodePortAddrs{}, proxy.IPv6, nil)
	mustProbe(t, port)
}

func TestIPv6Loopback(t *testing.T) {
	l, err := net.Listen("tcp6", "[::1]:0")
	if err != nil {
		t.Fatalf("no IPv6 loopback (every machine of this kind has one): %v", err)
	}
	port := uint16(l.Addr().(*net.TCPAddr).Port)
	l.Close()
	var healthy atomic.Bool
	healthy.Store(true)
	s, _ := newServer(t, &healthy)
	addrs := desired.NodePortAddrs{IPs: []netip.Addr{netip.MustParseAddr("::1"), netip.MustParseAddr("127.0.0.1")}}
	s.Sync(addrs, proxy.IPv6, []desired.HealthCheck{{Service: svcA, Port: port, LocalReady: 1}})
	p, err := probeAt(t, "::1", port, "/")
	if err != nil || p.code != 200 {
		t.Fatalf("probe [::1]: %+v %v", p, err)
	}
	if _, err := probeAt(t, "127.0.0.1", port, "/"); err == nil {
		t.Error("IPv6 sync listened on an IPv4 address")
	}
}

func TestListenFailureIsReportedAndRetried(t *testing.T) {
	var healthy atomic.Bool
	healthy.Store(true)
	s, rec := newServer(t, &healthy)
	busy, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := uint16(busy.Addr().(*net.TCPAddr).Port)
	checks := []desired.HealthCheck{{Service: svcA, Port: port, LocalReady: 1}}
	s.Sync(loopback4, proxy.IPv4, checks)
	rec.mu.Lock()
	got := rec.errors[svcA]
	rec.mu.Unlock()
	if got == nil {
		t.Fatal("listen failure not reported")
	}

	busy.Close()
	s.Sync(loopback4, proxy.IPv4, checks)
	if p := mustProbe(t, port); p.code != 200 {
		t.Fatalf("after retry: %+v", p)
	}
}

func TestAllNodePortAddressesListenOnUnspecified(t *testing.T) {
	var healthy atomic.Bool
	s, _ := newServer(t, &healthy)
	var got []string
	// Never bind the unspecified address in a test: record and refuse.
	s.listen = func(network, address string) (net.Listener, error) {
		got = append(got, network+" "+address)
		return nil, errors.New("not in tests")
	}
	s.Sync(desired.NodePortAddrs{All: true}, proxy.IPv4, []desired.HealthCheck{{Service: svcA, Port: 30001}})
	s.Sync(desired.NodePortAddrs{All: true}, proxy.IPv6, []desired.HealthCheck{{Service: svcA, Port: 30001}})
	want := []string{"tcp4 0.0.0.0:30001", "tcp6 [::]:30001"}
	if len(got) != 2 || got[0] != want[0] || got[1] != want[1] {
		t.Fatalf("listened on %v, want %v", got, want)
	}
}

// TestDropsIdleAndSlowConnections: a load balancer's probes are short; a
// client that keeps a connection idle after a probe, or never finishes its
// request, must not hold the port's goroutine and socket for ever. Only the
// timeout a case exercises is short (100 ms); the 20 s deadline only guards
// against a hang.
func TestDropsIdleAndSlowConnections(t *testing.T) {
	const short, long = 100 * time.Millisecond, 30 * time.Second
	for name, c := range map[string]struct {
		timeouts metrics.Timeouts
		request  string
	}{
		"idle after a probe": {metrics.Timeouts{ReadHeader: long, Read: long, Write: long, Idle: short},
			"GET / HTTP/1.1\r\nHost: x\r\n\r\n"},
		"partial request": {metrics.Timeouts{ReadHeader: short, Read: long, Write: long, Idle: long},
			"GET / HTTP/1.1\r\nHost: x\r\nX-Slow: "},
	} {
		var healthy atomic.Bool
		healthy.Store(true)
		s, _ := newServer(t, &healthy)
		s.timeouts = c.timeouts
		port := freePort(t, "tcp4", "127.0.0.1")
		s.Sync(loopback4, proxy.IPv4, []desired.HealthCheck{{Service: svcA, Port: port, LocalReady: 1}})
		conn, err := net.Dial("tcp4", net.JoinHostPort("127.0.0.1", strconv.Itoa(int(port))))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := io.WriteString(conn, c.request); err != nil {
			t.Fatal(err)
		}
		if err := conn.SetReadDeadline(time.Now().Add(20 * time.Second)); err != nil {
			t.Fatal(err)
		}
		// Reads the probe's answer, if any, then waits for the close.
		if _, err := io.Copy(io.Discard, conn); errors.Is(err, os.ErrDeadlineExceeded) {
			t.Errorf("%s: connection still open after 20s", name)
		}
		conn.Close()
		s.Close()
	}
}
