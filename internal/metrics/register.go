package metrics

import (
	"context"
	"fmt"
	"net/url"
	"runtime"
	"runtime/debug"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	clientmetrics "k8s.io/client-go/tools/metrics"
)

// Option adjusts Register.
type Option func(*registerOptions)

type registerOptions struct {
	nfacct NFAcctReader
}

// WithNFAcct gives the iptables-mode nfacct collectors their counter reader.
// Without it they are registered but report nothing.
func WithNFAcct(r NFAcctReader) Option {
	return func(o *registerOptions) { o.nfacct = r }
}

// Register adds to reg the kubeproxy_* families that mode exposes, the Go
// and process collectors, kubernetes_build_info, and client-go's
// rest_client_* families. A registry takes one Register call.
func Register(reg prometheus.Registerer, mode string, opts ...Option) error {
	switch mode {
	case ModeIPTables, ModeNFTables, ModeIPVS:
	default:
		return fmt.Errorf("register metrics: unknown proxy mode %q", mode)
	}
	var o registerOptions
	for _, opt := range opts {
		opt(&o)
	}
	cs := []prometheus.Collector{
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		newBuildInfo(),
		restClientRequests,
		restClientLatency,
	}
	for _, f := range families {
		if f.in(mode) {
			cs = append(cs, f.collector)
		}
	}
	if mode == ModeIPTables {
		cs = append(cs, newNFAcctCollectors(o.nfacct)...)
	}
	for _, c := range cs {
		if err := reg.Register(c); err != nil {
			return fmt.Errorf("register metrics: %w", err)
		}
	}
	registerClientGo()
	return nil
}

// newBuildInfo returns kubernetes_build_info, which component-base exposes
// on every Kubernetes binary and monitoring stacks keep. Values describe
// this binary.
func newBuildInfo() prometheus.Collector {
	info := buildInfo()
	g := prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "kubernetes_build_info",
		Help: "A metric with a constant '1' value labeled by major, minor, git version, git commit, git tree state, " +
			"build date, Go version, and compiler from which Kubernetes was built, and platform on which it is running.",
		ConstLabels: info,
	})
	g.Set(1)
	return g
}

func buildInfo() prometheus.Labels {
	l := prometheus.Labels{
		"major": "", "minor": "", "git_version": "v0.0.0-dev", "git_commit": "",
		"git_tree_state": "", "build_date": "", "go_version": runtime.Version(),
		"compiler": runtime.Compiler, "platform": runtime.GOOS + "/" + runtime.GOARCH,
	}
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return l
	}
	if v := bi.Main.Version; v != "" && v != "(devel)" {
		l["git_version"] = v
		parts := strings.SplitN(strings.TrimPrefix(v, "v"), ".", 3)
		if len(parts) >= 2 {
			l["major"], l["minor"] = parts[0], parts[1]
		}
	}
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			l["git_commit"] = s.Value
		case "vcs.time":
			l["build_date"] = s.Value
		case "vcs.modified":
			l["git_tree_state"] = map[string]string{"true": "dirty", "false": "clean"}[s.Value]
		}
	}
	return l
}

// client-go's request metrics, under component-base's names and labels.
var (
	restClientRequests = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "rest_client_requests_total",
		Help: "Number of HTTP requests, partitioned by status code, method, and host.",
	}, []string{"code", "method", "host"})
	restClientLatency = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "rest_client_request_duration_seconds",
		Help:    "Request latency in seconds. Broken down by verb, and host.",
		Buckets: []float64{0.005, 0.025, 0.1, 0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 15.0, 30.0, 60.0},
	}, []string{"verb", "host"})
)

type resultAdapter struct{ v *prometheus.CounterVec }

func (a resultAdapter) Increment(_ context.Context, code, method, host string) {
	a.v.WithLabelValues(code, method, host).Inc()
}

type latencyAdapter struct{ v *prometheus.HistogramVec }

func (a latencyAdapter) Observe(_ context.Context, verb string, u url.URL, latency time.Duration) {
	a.v.WithLabelValues(verb, u.Host).Observe(latency.Seconds())
}

// registerClientGo points client-go at our collectors. client-go accepts
// only the first registration per process, so later calls change nothing;
// the collectors are package variables, hence every registry sees the same
// counts.
func registerClientGo() {
	clientmetrics.Register(clientmetrics.RegisterOpts{
		RequestResult:  resultAdapter{restClientRequests},
		RequestLatency: latencyAdapter{restClientLatency},
	})
}
