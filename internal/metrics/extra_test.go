package metrics

import (
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

func TestWithHandlers(t *testing.T) {
	base := NewHandler(HandlerOptions{Gatherer: prometheus.NewRegistry(), Mode: "nftables"})
	if WithHandlers(base, nil) != base {
		t.Error("no extra handlers should return the base handler itself")
	}
	h := WithHandlers(base, map[string]http.Handler{
		"/debug/svcproxy/state": http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			_, _ = io.WriteString(w, "state")
		}),
	})
	for path, want := range map[string]string{"/proxyMode": "nftables", "/debug/svcproxy/state": "state", "/healthz": "ok"} {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
		if rec.Code != http.StatusOK || rec.Body.String() != want {
			t.Errorf("GET %s = %d %q, want %q", path, rec.Code, rec.Body, want)
		}
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/nope", nil))
	if rec.Code != http.StatusNotFound {
		t.Errorf("GET /nope = %d, want 404", rec.Code)
	}
}
