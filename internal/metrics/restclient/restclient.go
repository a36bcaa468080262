// Package restclient exposes client-go's request metrics under
// component-base's names (rest_client_requests_total,
// rest_client_request_duration_seconds), which monitoring stacks keep for
// every Kubernetes component. It is apart from internal/metrics so that the
// backends, which may import internal/metrics, never depend on client-go.
package restclient

import (
	"context"
	"fmt"
	"net/url"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	clientmetrics "k8s.io/client-go/tools/metrics"
)

var (
	requests = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "rest_client_requests_total",
		Help: "Number of HTTP requests, partitioned by status code, method, and host.",
	}, []string{"code", "method", "host"})
	latency = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "rest_client_request_duration_seconds",
		Help:    "Request latency in seconds. Broken down by verb, and host.",
		Buckets: []float64{0.005, 0.025, 0.1, 0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 15.0, 30.0, 60.0},
	}, []string{"verb", "host"})
)

// Register adds the two families to reg and points client-go at them.
// client-go accepts only the first registration per process, so later calls
// change nothing there; the collectors are package variables, hence every
// registry sees the same counts.
func Register(reg prometheus.Registerer) error {
	for _, c := range []prometheus.Collector{requests, latency} {
		if err := reg.Register(c); err != nil {
			return fmt.Errorf("register rest client metrics: %w", err)
		}
	}
	clientmetrics.Register(clientmetrics.RegisterOpts{
		RequestResult:  resultAdapter{requests},
		RequestLatency: latencyAdapter{latency},
	})
	return nil
}

type resultAdapter struct{ v *prometheus.CounterVec }

func (a resultAdapter) Increment(_ context.Context, code, method, host string) {
	a.v.WithLabelValues(code, method, host).Inc()
}

type latencyAdapter struct{ v *prometheus.HistogramVec }

func (a latencyAdapter) Observe(_ context.Context, verb string, u url.URL, d time.Duration) {
	a.v.WithLabelValues(verb, u.Host).Observe(d.Seconds())
}
