package metrics

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/pprof"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"k8s.io/component-base/metrics/prometheus/slis"
	"k8s.io/klog/v2"
)

// HandlerOptions configures the metricsBindAddress handler.
type HandlerOptions struct {
	// Gatherer is what /metrics serves (normally the Registry passed to
	// Register).
	Gatherer prometheus.Gatherer
	// Mode is the proxy mode /proxyMode reports.
	Mode string
	// Config is the running configuration /configz serves as JSON.
	Config any
	// EnableProfiling adds /debug/pprof/* and /debug/flags/v.
	EnableProfiling bool
	// ZPages, when set, adds /flagz and /statusz.
	ZPages *ZPages
}

// NewHandler returns the handler for metricsBindAddress (default :10249):
// /metrics, /proxyMode, /configz, /healthz and, with profiling, the
// debug endpoints.
func NewHandler(o HandlerOptions) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(o.Gatherer, promhttp.HandlerOpts{}))
	mux.HandleFunc("/proxyMode", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.Header().Set("X-Content-Type-Options", "nosniff")
		_, _ = io.WriteString(w, o.Mode)
	})
	mux.HandleFunc("/configz", configzHandler(o.Config))
	// component-base's SLI families (healthcheck status), as upstream serves.
	slis.SLIMetricsWithReset{}.Install(mux)
	if o.ZPages != nil {
		o.ZPages.install(mux)
	}
	// A generic liveness endpoint of the metrics server itself; proxy
	// health lives on healthzBindAddress.
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.Header().Set("X-Content-Type-Options", "nosniff")
		_, _ = io.WriteString(w, "ok")
	})
	if o.EnableProfiling {
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
		mux.HandleFunc("/debug/flags/v", verbosityHandler)
	}
	return mux
}

// ConfigzGroup is the key /configz files the configuration under, as
// component-base's configz does for kube-proxy (its API group).
const ConfigzGroup = "kubeproxy.config.k8s.io"

func configzHandler(config any) http.HandlerFunc {
	return func(w http.ResponseWriter, _ *http.Request) {
		body, err := json.Marshal(map[string]any{ConfigzGroup: config})
		if err != nil {
			http.Error(w, fmt.Sprintf("cannot encode configuration: %v", err), http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("X-Content-Type-Options", "nosniff")
		_, _ = w.Write(body)
	}
}

// verbosityHandler sets klog's -v from a PUT body, as component-base's
// /debug/flags/v does.
func verbosityHandler(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPut {
		w.Header().Set("Allow", http.MethodPut)
		http.Error(w, "only PUT is allowed", http.StatusMethodNotAllowed)
		return
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, 64))
	if err != nil {
		http.Error(w, fmt.Sprintf("cannot read request body: %v", err), http.StatusBadRequest)
		return
	}
	value := strings.TrimSpace(string(body))
	var level klog.Level
	if err := level.Set(value); err != nil {
		http.Error(w, fmt.Sprintf("invalid verbosity %q: %v", value, err), http.StatusBadRequest)
		return
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	_, _ = fmt.Fprintf(w, "successfully set klog.logging.verbosity to %s", value)
}
