// Package metrics defines the kubeproxy_* metric families under upstream
// kube-proxy's exact name, type, help, buckets and labels, registers the
// families each proxy mode exposes, and serves them on metricsBindAddress.
// The families the backends update themselves (and the nfacct collectors)
// are defined in pkg/pipeline/metrics, which pkg/ may import; this package
// registers them with the rest.
//
// The collectors are package variables, as upstream's are, so that the
// syncer, the health servers and the backends can update them without
// threading a handle through every constructor. Which of them a scrape shows
// is decided only by Register.
package metrics

import (
	"github.com/prometheus/client_golang/prometheus"

	proxymetrics "github.com/svcproxy/svcproxy/pkg/pipeline/metrics"
	"github.com/svcproxy/svcproxy/pkg/proxy"
)

// Label names shared by several families.
const (
	LabelIPFamily      = proxymetrics.LabelIPFamily
	LabelTrafficPolicy = "traffic_policy"
	LabelTable         = proxymetrics.LabelTable
	LabelCode          = "code"
)

// Values of the traffic_policy label of SyncProxyRulesNoLocalEndpointsTotal.
const (
	TrafficPolicyInternal = "internal"
	TrafficPolicyExternal = "external"
)

const subsystem = proxymetrics.Subsystem

// syncBuckets are the buckets of every sync duration histogram:
// 1ms doubling up to about 16s.
var syncBuckets = prometheus.ExponentialBuckets(0.001, 2, 15)

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

// alpha is proxymetrics.Alpha: one "[ALPHA] " prefix for every family.
var alpha = proxymetrics.Alpha

func histogram(name, help string, buckets []float64, labels ...string) *prometheus.HistogramVec {
	return prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Subsystem: subsystem, Name: name, Help: alpha(help), Buckets: buckets,
	}, labels)
}

var (
	gauge   = proxymetrics.NewGaugeVec
	counter = proxymetrics.NewCounterVec
)

// Sync metrics, updated by the syncer. Families labelled ip_family take
// "IPv4" or "IPv6".
var (
	// SyncProxyRulesLatency observes every sync attempt, full or partial.
	SyncProxyRulesLatency = histogram("sync_proxy_rules_duration_seconds",
		"SyncProxyRules latency in seconds", syncBuckets, LabelIPFamily)
	// SyncFullProxyRulesLatency observes successful full syncs.
	SyncFullProxyRulesLatency = histogram("sync_full_proxy_rules_duration_seconds",
		"SyncProxyRules latency in seconds for full resyncs", syncBuckets, LabelIPFamily)
	// SyncPartialProxyRulesLatency observes successful partial syncs.
	SyncPartialProxyRulesLatency = histogram("sync_partial_proxy_rules_duration_seconds",
		"SyncProxyRules latency in seconds for partial resyncs", syncBuckets, LabelIPFamily)
	// SyncProxyRulesLastTimestamp is when the rules were last synced successfully.
	SyncProxyRulesLastTimestamp = gauge("sync_proxy_rules_last_timestamp_seconds",
		"The last time proxy rules were successfully synced", LabelIPFamily)
	// SyncProxyRulesLastQueuedTimestamp is when a sync was last requested;
	// much later than SyncProxyRulesLastTimestamp means something is hung.
	SyncProxyRulesLastQueuedTimestamp = gauge("sync_proxy_rules_last_queued_timestamp_seconds",
		"The last time a sync of proxy rules was queued", LabelIPFamily)
	// NetworkProgrammingLatency observes, per EndpointSlice change consumed
	// by a successful sync, the time from the change's trigger time (set by
	// the EndpointSlice controller) to the end of the sync. It feeds the
	// SIG-Scalability network programming latency SLI.
	NetworkProgrammingLatency = histogram("network_programming_duration_seconds",
		"In Cluster Network Programming Latency in seconds", programmingBuckets, LabelIPFamily)

	// EndpointChangesPending counts EndpointSlice changes not yet synced.
	EndpointChangesPending = prometheus.NewGauge(prometheus.GaugeOpts{Subsystem: subsystem,
		Name: "sync_proxy_rules_endpoint_changes_pending", Help: alpha("Pending proxy rules Endpoint changes")})
	// EndpointChangesTotal counts EndpointSlice changes seen.
	EndpointChangesTotal = prometheus.NewCounter(prometheus.CounterOpts{Subsystem: subsystem,
		Name: "sync_proxy_rules_endpoint_changes_total", Help: alpha("Cumulative proxy rules Endpoint changes")})
	// ServiceChangesPending counts Service changes not yet synced.
	ServiceChangesPending = prometheus.NewGauge(prometheus.GaugeOpts{Subsystem: subsystem,
		Name: "sync_proxy_rules_service_changes_pending", Help: alpha("Pending proxy rules Service changes")})
	// ServiceChangesTotal counts Service changes seen.
	ServiceChangesTotal = prometheus.NewCounter(prometheus.CounterOpts{Subsystem: subsystem,
		Name: "sync_proxy_rules_service_changes_total", Help: alpha("Cumulative proxy rules Service changes")})
	// SyncProxyRulesNoLocalEndpointsTotal counts services whose Local
	// traffic policy leaves no endpoint on this node.
	SyncProxyRulesNoLocalEndpointsTotal = gauge("sync_proxy_rules_no_local_endpoints_total",
		"Number of services with a Local traffic policy and no endpoints", LabelTrafficPolicy, LabelIPFamily)
)

// Backend metrics updated by the syncer (failures) or the conntrack
// reconciler. Those the backends update themselves are in pkg/pipeline/metrics.
var (
	// IPTablesRestoreFailuresTotal counts failed syncs in iptables and ipvs mode.
	IPTablesRestoreFailuresTotal = counter("sync_proxy_rules_iptables_restore_failures_total",
		"Cumulative proxy iptables restore failures", LabelIPFamily)
	// NFTablesSyncFailuresTotal counts failed syncs in nftables mode.
	NFTablesSyncFailuresTotal = counter("sync_proxy_rules_nftables_sync_failures_total",
		"Cumulative proxy nftables sync failures", LabelIPFamily)
	// ReconcileConntrackFlowsLatency observes each stale-flow cleanup.
	ReconcileConntrackFlowsLatency = histogram("conntrack_reconciler_sync_duration_seconds",
		"ReconcileConntrackFlowsLatency latency in seconds", syncBuckets, LabelIPFamily)
	// ReconcileConntrackFlowsDeletedEntriesTotal counts deleted stale flows.
	ReconcileConntrackFlowsDeletedEntriesTotal = counter("conntrack_reconciler_deleted_entries_total",
		"Cumulative conntrack flows deleted by conntrack reconciler", LabelIPFamily)
)

// Health metrics, updated by the :10256 server; code is "200" or "503".
var (
	ProxyHealthzTotal = counter("proxy_healthz_total", "Cumulative proxy healthz HTTP status", LabelCode)
	ProxyLivezTotal   = counter("proxy_livez_total", "Cumulative proxy livez HTTP status", LabelCode)
)

// family is one kubeproxy_* family and the modes that expose it.
type family struct {
	collector prometheus.Collector
	// labels are the variable label names; tests use them to instantiate a
	// child of every vector.
	labels []string
	// modes lists upstream's proxy modes that register the family; nil
	// means every mode. A mode of svcproxy's own adds its families with
	// WithFamilies (its row in internal/backends).
	modes []proxy.Mode
}

// families lists every kubeproxy_* family except the nfacct collectors,
// which need a reader and are built by Register.
var families = []family{
	{SyncProxyRulesLatency, []string{LabelIPFamily}, nil},
	{SyncFullProxyRulesLatency, []string{LabelIPFamily}, []proxy.Mode{proxy.ModeIPTables, proxy.ModeNFTables}},
	{SyncPartialProxyRulesLatency, []string{LabelIPFamily}, []proxy.Mode{proxy.ModeIPTables, proxy.ModeNFTables}},
	{SyncProxyRulesLastTimestamp, []string{LabelIPFamily}, nil},
	{SyncProxyRulesLastQueuedTimestamp, []string{LabelIPFamily}, nil},
	{NetworkProgrammingLatency, []string{LabelIPFamily}, nil},
	{EndpointChangesPending, nil, nil},
	{EndpointChangesTotal, nil, nil},
	{ServiceChangesPending, nil, nil},
	{ServiceChangesTotal, nil, nil},
	{SyncProxyRulesNoLocalEndpointsTotal, []string{LabelTrafficPolicy, LabelIPFamily}, nil},
	{IPTablesRestoreFailuresTotal, []string{LabelIPFamily}, []proxy.Mode{proxy.ModeIPTables, proxy.ModeIPVS}},
	{proxymetrics.IPTablesPartialRestoreFailuresTotal, []string{LabelIPFamily}, []proxy.Mode{proxy.ModeIPTables}},
	{proxymetrics.IPTablesRulesTotal, []string{LabelTable, LabelIPFamily}, []proxy.Mode{proxy.ModeIPTables}},
	{proxymetrics.IPTablesRulesLastSync, []string{LabelTable, LabelIPFamily}, []proxy.Mode{proxy.ModeIPTables}},
	{NFTablesSyncFailuresTotal, []string{LabelIPFamily}, []proxy.Mode{proxy.ModeNFTables}},
	{proxymetrics.NFTablesCleanupFailuresTotal, []string{LabelIPFamily}, []proxy.Mode{proxy.ModeNFTables}},
	{ReconcileConntrackFlowsLatency, []string{LabelIPFamily}, nil},
	{ReconcileConntrackFlowsDeletedEntriesTotal, []string{LabelIPFamily}, nil},
	{ProxyHealthzTotal, []string{LabelCode}, nil},
	{ProxyLivezTotal, []string{LabelCode}, nil},
	{QuarantinedServicePorts, []string{LabelIPFamily}, nil},
}

func (f family) in(mode proxy.Mode) bool {
	if f.modes == nil {
		return true
	}
	for _, m := range f.modes {
		if m == mode {
			return true
		}
	}
	return false
}
