package healthz

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/svcproxy/svcproxy/internal/metrics"
	"github.com/svcproxy/svcproxy/pkg/proxy"
)

const syncPeriod = 30 * time.Second // healthTimeout = 60s

var start = time.Date(2026, 7, 1, 12, 0, 0, 0, time.UTC)

func newServer(t *testing.T) (*Server, *clocktesting.FakeClock) {
	t.Helper()
	clk := clocktesting.NewFakeClock(start)
	s := New(syncPeriod, clk)
	s.SetNodeEligible(true)
	return s, clk
}

type response struct {
	code   int
	header http.Header
	body   Health
	raw    map[string]json.RawMessage
}

func get(t *testing.T, s *Server, path string) response {
	t.Helper()
	rec := httptest.NewRecorder()
	s.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
	r := response{code: rec.Code, header: rec.Header()}
	if err := json.Unmarshal(rec.Body.Bytes(), &r.body); err != nil {
		t.Fatalf("%s: body %q: %v", path, rec.Body.String(), err)
	}
	if err := json.Unmarshal(rec.Body.Bytes(), &r.raw); err != nil {
		t.Fatal(err)
	}
	return r
}

func expectCodes(t *testing.T, s *Server, healthz, livez int) {
	t.Helper()
	if r := get(t, s, "/healthz"); r.code != healthz {
		t.Errorf("/healthz = %d, want %d (body %+v)", r.code, healthz, r.body)
	}
	if r := get(t, s, "/livez"); r.code != livez {
		t.Errorf("/livez = %d, want %d (body %+v)", r.code, livez, r.body)
	}
}

func TestHealthyAtStartAndWhenIdle(t *testing.T) {
	s, clk := newServer(t)
	expectCodes(t, s, 200, 200)
	s.Updated(proxy.IPv4)
	clk.Step(24 * time.Hour) // idle for a day: nothing pending
	expectCodes(t, s, 200, 200)
}

func TestPendingUpdateBecomesUnhealthyAfterTimeout(t *testing.T) {
	s, clk := newServer(t)
	s.Updated(proxy.IPv4)
	s.Updated(proxy.IPv6)
	s.QueuedUpdate(proxy.IPv4)
	clk.Step(59 * time.Second)
	s.QueuedUpdate(proxy.IPv4) // a later change does not move the oldest one
	expectCodes(t, s, 200, 200)

	clk.Step(time.Second) // the change has now waited 2×syncPeriod
	expectCodes(t, s, 503, 503)
	r := get(t, s, "/livez")
	if r.body.Healthy || r.body.Status[proxy.IPv4].Healthy || !r.body.Status[proxy.IPv6].Healthy {
		t.Errorf("per-family status = %+v, want IPv4 unhealthy, IPv6 healthy", r.body.Status)
	}
	if !r.body.LastUpdated.Equal(start) {
		t.Errorf("lastUpdated when unhealthy = %v, want the last sync %v", r.body.LastUpdated, start)
	}

	s.Updated(proxy.IPv4) // the sync finally succeeded
	expectCodes(t, s, 200, 200)
}

func TestHealthyResponseBody(t *testing.T) {
	s, clk := newServer(t)
	s.Updated(proxy.IPv4)
	clk.Step(10 * time.Minute)
	r := get(t, s, "/healthz")
	if r.header.Get("Content-Type") != "application/json" || r.header.Get("X-Content-Type-Options") != "nosniff" {
		t.Errorf("headers = %v", r.header)
	}
	now := start.Add(10 * time.Minute)
	if !r.body.LastUpdated.Equal(now) || !r.body.CurrentTime.Equal(now) {
		t.Errorf("lastUpdated=%v currentTime=%v, want both now (%v)", r.body.LastUpdated, r.body.CurrentTime, now)
	}
	if r.body.NodeEligible == nil || !*r.body.NodeEligible || !r.body.Healthy {
		t.Errorf("body = %+v", r.body)
	}
	if st := r.body.Status[proxy.IPv4]; !st.Healthy || !st.LastUpdated.Equal(start) {
		t.Errorf("status[IPv4] = %+v", st)
	}
	if _, ok := get(t, s, "/livez").raw["nodeEligible"]; ok {
		t.Error("/livez reports nodeEligible")
	}
}

func TestNodeEligibilityAffectsHealthzOnly(t *testing.T) {
	s, _ := newServer(t)
	s.Updated(proxy.IPv4)
	s.SetNodeEligible(false)
	expectCodes(t, s, 503, 200)
	if r := get(t, s, "/healthz"); r.body.NodeEligible == nil || *r.body.NodeEligible || !r.body.Healthy {
		t.Errorf("body = %+v, want healthy but not eligible", r.body)
	}
	s.SetNodeEligible(true)
	expectCodes(t, s, 200, 200)
}

func TestNodeUnknownUntilSynced(t *testing.T) {
	s := New(syncPeriod, clocktesting.NewFakeClock(start))
	expectCodes(t, s, 503, 200)
}

func TestResponsesAreCounted(t *testing.T) {
	s, clk := newServer(t)
	h200 := count(t, metrics.ProxyHealthzTotal.WithLabelValues("200"))
	h503 := count(t, metrics.ProxyHealthzTotal.WithLabelValues("503"))
	l200 := count(t, metrics.ProxyLivezTotal.WithLabelValues("200"))
	l503 := count(t, metrics.ProxyLivezTotal.WithLabelValues("503"))

	s.Updated(proxy.IPv4)
	expectCodes(t, s, 200, 200)
	s.QueuedUpdate(proxy.IPv4)
	clk.Step(2 * syncPeriod)
	expectCodes(t, s, 503, 503)
	expectCodes(t, s, 503, 503)

	for _, c := range []struct {
		name      string
		got, want float64
	}{
		{"healthz 200", count(t, metrics.ProxyHealthzTotal.WithLabelValues("200")) - h200, 1},
		{"healthz 503", count(t, metrics.ProxyHealthzTotal.WithLabelValues("503")) - h503, 2},
		{"livez 200", count(t, metrics.ProxyLivezTotal.WithLabelValues("200")) - l200, 1},
		{"livez 503", count(t, metrics.ProxyLivezTotal.WithLabelValues("503")) - l503, 2},
	} {
		if c.got != c.want {
			t.Errorf("%s: +%v, want +%v", c.name, c.got, c.want)
		}
	}
}

func count(t *testing.T, c interface{ Write(*dto.Metric) error }) float64 {
	t.Helper()
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetCounter().GetValue()
}

func TestServeOnRealListener(t *testing.T) {
	s, _ := newServer(t)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { s.Serve(ctx, addr, nil); close(done) }()
	defer func() { cancel(); <-done }()

	deadline := time.Now().Add(30 * time.Second) // guards a hang only
	for {
		resp, err := http.Get("http://" + addr + "/livez")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("/livez = %d", resp.StatusCode)
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("server never answered: %v", err)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
