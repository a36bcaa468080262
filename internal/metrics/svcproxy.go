package metrics

import "github.com/prometheus/client_golang/prometheus"

// svcproxy's own families, beyond upstream's: under the svcproxy_ prefix, so
// that no kubeproxy_* name means something upstream does not.

// QuarantinedServicePorts counts the service ports kept out of the
// dataplane because the kernel rejected them (see internal/syncer).
var QuarantinedServicePorts = prometheus.NewGaugeVec(prometheus.GaugeOpts{
	Name: "svcproxy_quarantined_service_ports",
	Help: "Service ports kept out of the dataplane because the kernel rejected their rules; each is retried when its Service or endpoints change.",
}, []string{LabelIPFamily})

// The early part of a backend whose dataplane serves before its sync ends
// (syncer.EarlyServer: ebpf mode's socket-hook maps). Its row registers
// them; the syncer sets them after each successful sync.
var (
	// EarlyServedLastTimestamp is when the early part last held a
	// successfully synced State.
	EarlyServedLastTimestamp = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "svcproxy_sync_connect_time_last_timestamp_seconds",
		Help: "The last time the connect-time path (ebpf mode's socket-hook maps) held a successfully synced state; kubeproxy_sync_proxy_rules_last_timestamp_seconds is when the whole sync, nftables rules included, ended.",
	}, []string{LabelIPFamily})
	// EarlyProgrammingLatency is network programming latency measured at
	// the early part: an EndpointSlice change's trigger time to the moment
	// the connect-time path held it. Its buckets are finer than upstream's
	// histogram's, whose first bound is 0.25 s.
	EarlyProgrammingLatency = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "svcproxy_connect_time_programming_duration_seconds",
		Help:    "From an EndpointSlice change's trigger time to the connect-time path (ebpf mode's socket-hook maps) holding it.",
		Buckets: earlyBuckets,
	}, []string{LabelIPFamily})
)

// earlyBuckets resolve milliseconds where a map write takes them, and
// still count a change delayed by a slow API server.
var earlyBuckets = func() []float64 {
	b := prometheus.LinearBuckets(0.001, 0.001, 10)
	b = append(b, 0.0125, 0.015, 0.02, 0.025, 0.03, 0.04, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.5, 0.75)
	return append(b, 1, 2, 5, 10, 30, 60)
}()
