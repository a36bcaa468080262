package metrics

import (
	"context"
	"encoding/json"
	proxymetrics "github.com/svcproxy/svcproxy/pkg/pipeline/metrics"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/klog/v2"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/svcproxy/svcproxy/pkg/proxy"
)

func newTestServer(t *testing.T, profiling bool) *httptest.Server {
	t.Helper()
	reg := prometheus.NewRegistry()
	if err := Register(reg, proxy.ModeNFTables); err != nil {
		t.Fatal(err)
	}
	proxymetrics.SyncProxyRulesLastTimestamp.WithLabelValues("IPv4").Set(42)
	cfg := map[string]any{"mode": "nftables", "syncPeriod": "30s"}
	srv := httptest.NewServer(NewHandler(HandlerOptions{Gatherer: reg, Mode: string(proxy.ModeNFTables), Config: cfg, EnableProfiling: profiling}))
	t.Cleanup(srv.Close)
	return srv
}

func do(t *testing.T, method, url, body string) (int, http.Header, string) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, resp.Header, string(b)
}

func TestMetricsEndpoint(t *testing.T) {
	srv := newTestServer(t, false)
	code, _, body := do(t, http.MethodGet, srv.URL+"/metrics", "")
	if code != http.StatusOK {
		t.Fatalf("/metrics: %d", code)
	}
	if !strings.Contains(body, `kubeproxy_sync_proxy_rules_last_timestamp_seconds{ip_family="IPv4"} 42`) {
		t.Errorf("/metrics lacks the sample set by the test:\n%s", body)
	}
}

func TestProxyModeHealthzConfigz(t *testing.T) {
	srv := newTestServer(t, false)
	code, hdr, body := do(t, http.MethodGet, srv.URL+"/proxyMode", "")
	if code != http.StatusOK || body != "nftables" || !strings.HasPrefix(hdr.Get("Content-Type"), "text/plain") {
		t.Errorf("/proxyMode = %d %q (%s)", code, body, hdr.Get("Content-Type"))
	}
	code, _, body = do(t, http.MethodGet, srv.URL+"/healthz", "")
	if code != http.StatusOK || body != "ok" {
		t.Errorf("/healthz = %d %q", code, body)
	}
	code, hdr, body = do(t, http.MethodGet, srv.URL+"/configz", "")
	var wrapped map[string]map[string]string
	if err := json.Unmarshal([]byte(body), &wrapped); err != nil || code != http.StatusOK {
		t.Fatalf("/configz = %d %q: %v", code, body, err)
	}
	cfg := wrapped["kubeproxy.config.k8s.io"]
	if cfg["mode"] != "nftables" || cfg["syncPeriod"] != "30s" || hdr.Get("Content-Type") != "application/json" {
		t.Errorf("/configz = %v (%s)", cfg, hdr.Get("Content-Type"))
	}
}

func TestProfilingOnlyWhenEnabled(t *testing.T) {
	off := newTestServer(t, false)
	if code, _, _ := do(t, http.MethodGet, off.URL+"/debug/pprof/", ""); code != http.StatusNotFound {
		t.Errorf("pprof without enableProfiling: %d, want 404", code)
	}
	if code, _, _ := do(t, http.MethodPut, off.URL+"/debug/flags/v", "3"); code != http.StatusNotFound {
		t.Errorf("flags/v without enableProfiling: %d, want 404", code)
	}
	on := newTestServer(t, true)
	if code, _, body := do(t, http.MethodGet, on.URL+"/debug/pprof/", ""); code != http.StatusOK || !strings.Contains(body, "goroutine") {
		t.Errorf("pprof index: %d", code)
	}
}

func TestFlagsVSetsVerbosity(t *testing.T) {
	srv := newTestServer(t, true)
	t.Cleanup(func() {
		var l klog.Level
		_ = l.Set("0")
	})
	if klog.V(5).Enabled() {
		t.Fatal("verbosity already 5 before the test")
	}
	if code, _, body := do(t, http.MethodPut, srv.URL+"/debug/flags/v", "5\n"); code != http.StatusOK {
		t.Fatalf("PUT 5: %d %s", code, body)
	}
	if !klog.V(5).Enabled() {
		t.Error("PUT /debug/flags/v 5 did not raise verbosity")
	}
	if code, _, _ := do(t, http.MethodPut, srv.URL+"/debug/flags/v", "loud"); code != http.StatusBadRequest {
		t.Errorf("PUT garbage: %d, want 400", code)
	}
	if code, _, _ := do(t, http.MethodGet, srv.URL+"/debug/flags/v", ""); code != http.StatusMethodNotAllowed {
		t.Errorf("GET: %d, want 405", code)
	}
}

// occupy holds a loopback port so that Serve cannot listen on it.
func occupy(t *testing.T) net.Listener {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

func TestServeHardFailReportsListenError(t *testing.T) {
	busy := occupy(t)
	errs := make(chan error, 1)
	done := make(chan struct{})
	go func() {
		Serve(context.Background(), ServeOptions{Name: "metrics", Addr: busy.Addr().String(), Handler: http.NotFoundHandler(), HardFail: errs})
		close(done)
	}()
	select {
	case err := <-errs:
		if !strings.Contains(err.Error(), busy.Addr().String()) {
			t.Errorf("error does not name the address: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("no error reported")
	}
	<-done
}

func TestServeRetriesEveryFiveSeconds(t *testing.T) {
	busy := occupy(t)
	addr := busy.Addr().String()
	clk := clocktesting.NewFakeClock(time.Now())
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		Serve(ctx, ServeOptions{Name: "metrics", Addr: addr, Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			_, _ = io.WriteString(w, "served")
		}), Clock: clk})
		close(done)
	}()
	t.Cleanup(func() { cancel(); <-done })

	// The first attempt fails; Serve then waits on the clock.
	waitFor(t, clk.HasWaiters)
	busy.Close()
	clk.Step(ListenRetryInterval - time.Millisecond)
	if !clk.HasWaiters() {
		t.Fatal("retried before 5s")
	}
	clk.Step(time.Millisecond)
	waitFor(t, func() bool {
		resp, err := http.Get("http://" + addr + "/")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return string(b) == "served"
	})
}

// waitFor polls cond; the deadline only guards against a hang.
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition never became true")
		}
		time.Sleep(5 * time.Millisecond)
	}
}
