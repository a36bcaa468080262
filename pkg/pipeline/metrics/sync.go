package metrics

import "github.com/prometheus/client_golang/prometheus"

// LabelTrafficPolicy labels SyncProxyRulesNoLocalEndpointsTotal with one of
// TrafficPolicyInternal and TrafficPolicyExternal.
const (
	LabelTrafficPolicy    = "traffic_policy"
	TrafficPolicyInternal = "internal"
	TrafficPolicyExternal = "external"
)

// SyncBuckets are the buckets of every sync duration histogram:
// 1ms doubling up to about 16s.
var SyncBuckets = prometheus.ExponentialBuckets(0.001, 2, 15)

// programmingBuckets are the network programming latency buckets: a
// leading 0, 0.25s and 0.5s, then whole seconds to 59s, 5s steps to 115s
// and 30s steps to 5 minutes.
var programmingBuckets = func() []float64 {
	b := []float64{0}
	b = append(b, prometheus.LinearBuckets(0.25, 0.25, 2)...)
	b = append(b, prometheus.LinearBuckets(1, 1, 59)...)
	b = append(b, prometheus.LinearBuckets(60, 5, 12)...)
	return append(b, prometheus.LinearBuckets(120, 30, 7)...)
}()

// Sync metrics, updated by the syncer. Families labelled ip_family take
// "IPv4" or "IPv6".
var (
	// SyncProxyRulesLatency observes every sync attempt, full or partial.
	SyncProxyRulesLatency = NewHistogramVec("sync_proxy_rules_duration_seconds",
		"SyncProxyRules latency in seconds", SyncBuckets, LabelIPFamily)
	// SyncFullProxyRulesLatency observes successful full syncs.
	SyncFullProxyRulesLatency = NewHistogramVec("sync_full_proxy_rules_duration_seconds",
		"SyncProxyRules latency in seconds for full resyncs", SyncBuckets, LabelIPFamily)
	// SyncPartialProxyRulesLatency observes successful partial syncs.
	SyncPartialProxyRulesLatency = NewHistogramVec("sync_partial_proxy_rules_duration_seconds",
		"SyncProxyRules latency in seconds for partial resyncs", SyncBuckets, LabelIPFamily)
	// SyncProxyRulesLastTimestamp is when the rules were last synced successfully.
	SyncProxyRulesLastTimestamp = NewGaugeVec("sync_proxy_rules_last_timestamp_seconds",
		"The last time proxy rules were successfully synced", LabelIPFamily)
	// SyncProxyRulesLastQueuedTimestamp is when a sync was last requested;
	// much later than SyncProxyRulesLastTimestamp means something is hung.
	SyncProxyRulesLastQueuedTimestamp = NewGaugeVec("sync_proxy_rules_last_queued_timestamp_seconds",
		"The last time a sync of proxy rules was queued", LabelIPFamily)
	// NetworkProgrammingLatency observes, per EndpointSlice change consumed
	// by a successful sync, the time from the change's trigger time (set by
	// the EndpointSlice controller) to the end of the sync. It feeds the
	// SIG-Scalability network programming latency SLI.
	NetworkProgrammingLatency = NewHistogramVec("network_programming_duration_seconds",
		"In Cluster Network Programming Latency in seconds", programmingBuckets, LabelIPFamily)

	// EndpointChangesPending counts EndpointSlice changes not yet synced.
	EndpointChangesPending = prometheus.NewGauge(prometheus.GaugeOpts{Subsystem: Subsystem,
		Name: "sync_proxy_rules_endpoint_changes_pending", Help: Alpha("Pending proxy rules Endpoint changes")})
	// EndpointChangesTotal counts EndpointSlice changes seen.
	EndpointChangesTotal = prometheus.NewCounter(prometheus.CounterOpts{Subsystem: Subsystem,
		Name: "sync_proxy_rules_endpoint_changes_total", Help: Alpha("Cumulative proxy rules Endpoint changes")})
	// ServiceChangesPending counts Service changes not yet synced.
	ServiceChangesPending = prometheus.NewGauge(prometheus.GaugeOpts{Subsystem: Subsystem,
		Name: "sync_proxy_rules_service_changes_pending", Help: Alpha("Pending proxy rules Service changes")})
	// ServiceChangesTotal counts Service changes seen.
	ServiceChangesTotal = prometheus.NewCounter(prometheus.CounterOpts{Subsystem: Subsystem,
		Name: "sync_proxy_rules_service_changes_total", Help: Alpha("Cumulative proxy rules Service changes")})
	// SyncProxyRulesNoLocalEndpointsTotal counts services whose Local
	// traffic policy leaves no endpoint on this node.
	SyncProxyRulesNoLocalEndpointsTotal = NewGaugeVec("sync_proxy_rules_no_local_endpoints_total",
		"Number of services with a Local traffic policy and no endpoints", LabelTrafficPolicy, LabelIPFamily)
)

// The syncer counts failed syncs under the family its mode exposes.
var (
	// IPTablesRestoreFailuresTotal counts failed syncs in iptables and ipvs mode.
	IPTablesRestoreFailuresTotal = NewCounterVec("sync_proxy_rules_iptables_restore_failures_total",
		"Cumulative proxy iptables restore failures", LabelIPFamily)
	// NFTablesSyncFailuresTotal counts failed syncs in nftables mode.
	NFTablesSyncFailuresTotal = NewCounterVec("sync_proxy_rules_nftables_sync_failures_total",
		"Cumulative proxy nftables sync failures", LabelIPFamily)
)

// svcproxy's own families, beyond upstream's: under the svcproxy_ prefix, so
// that no kubeproxy_* name means something upstream does not.

// QuarantinedServicePorts counts the service ports kept out of the
// dataplane because the kernel rejected them (see pkg/pipeline/syncer).
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
