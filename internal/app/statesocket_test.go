package app

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/klog/v2"

	"github.com/svcproxy/svcproxy/internal/debugstate"
	"github.com/svcproxy/svcproxy/internal/localapi"
	"github.com/svcproxy/svcproxy/pkg/pipeline/desired"
	"github.com/svcproxy/svcproxy/pkg/pipeline/model"
	"github.com/svcproxy/svcproxy/pkg/proxy"
)

// TestMetricsServerHasNoState: the programmed state (every Service and
// endpoint of the cluster) is not on the metrics port, where any process
// of the node's network namespace (every hostNetwork pod) could read it,
// whatever enableProfiling says.
func TestMetricsServerHasNoState(t *testing.T) {
	for _, profiling := range []string{"--profiling=false", "--profiling=true"} {
		d := &daemon{cfg: mustRun(t, "--hostname-override=n1", "--proxy-mode=nftables", profiling),
			state: debugstate.NewRecorder()}
		d.state.Record(&desired.State{Family: proxy.IPv4}, model.Changes{})
		h := d.metricsHandler(prometheus.NewRegistry())
		for _, remote := range []string{"127.0.0.1:4000", "[::1]:4000"} {
			req := httptest.NewRequest(http.MethodGet, "/debug/svcproxy/state", nil)
			req.RemoteAddr = remote
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, req)
			if rec.Code != http.StatusNotFound {
				t.Errorf("%s: GET /debug/svcproxy/state from %s on the metrics server = %d, want 404", profiling, remote, rec.Code)
			}
		}
	}
}

// TestStateSocketFlag: the daemon serves the state on /run/svcproxy unless
// --state-socket says otherwise, and an empty one serves none.
func TestStateSocketFlag(t *testing.T) {
	if cfg := mustRun(t, "--hostname-override=n1"); cfg.StateSocket != localapi.DefaultPath || localapi.DefaultPath != "/run/svcproxy/svcproxy.sock" {
		t.Errorf("default --state-socket = %q", cfg.StateSocket)
	}
	d := &daemon{cfg: mustRun(t, "--hostname-override=n1", "--state-socket="), logger: klog.Background(),
		state: debugstate.NewRecorder()}
	d.serveLocal()() // nothing to serve, nothing to close
}
