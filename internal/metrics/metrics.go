// Package metrics defines the kubeproxy_* metric families under upstream
// kube-proxy's exact name, type, help, buckets and labels, registers the
// families each proxy mode exposes, and serves them on metricsBindAddress.
// The families the pipeline updates (the syncer's, the backends' own and the
// nfacct collectors) are defined in pkg/pipeline/metrics, which pkg/ may
// import; this package defines the health servers' and the conntrack
// reconciler's and registers them all.
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
	LabelTrafficPolicy = proxymetrics.LabelTrafficPolicy
	LabelTable         = proxymetrics.LabelTable
	LabelCode          = "code"
)

// alpha is proxymetrics.Alpha: one "[ALPHA] " prefix for every family.
var alpha = proxymetrics.Alpha

var (
	gauge   = proxymetrics.NewGaugeVec
	counter = proxymetrics.NewCounterVec
)

// Backend metrics updated by the conntrack reconciler; the syncer's and
// those the backends update themselves are in pkg/pipeline/metrics.
var (
	// ReconcileConntrackFlowsLatency observes each stale-flow cleanup.
	ReconcileConntrackFlowsLatency = proxymetrics.NewHistogramVec("conntrack_reconciler_sync_duration_seconds",
		"ReconcileConntrackFlowsLatency latency in seconds", proxymetrics.SyncBuckets, LabelIPFamily)
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
	{proxymetrics.SyncProxyRulesLatency, []string{LabelIPFamily}, nil},
	{proxymetrics.SyncFullProxyRulesLatency, []string{LabelIPFamily}, []proxy.Mode{proxy.ModeIPTables, proxy.ModeNFTables}},
	{proxymetrics.SyncPartialProxyRulesLatency, []string{LabelIPFamily}, []proxy.Mode{proxy.ModeIPTables, proxy.ModeNFTables}},
	{proxymetrics.SyncProxyRulesLastTimestamp, []string{LabelIPFamily}, nil},
	{proxymetrics.SyncProxyRulesLastQueuedTimestamp, []string{LabelIPFamily}, nil},
	{proxymetrics.NetworkProgrammingLatency, []string{LabelIPFamily}, nil},
	{proxymetrics.EndpointChangesPending, nil, nil},
	{proxymetrics.EndpointChangesTotal, nil, nil},
	{proxymetrics.ServiceChangesPending, nil, nil},
	{proxymetrics.ServiceChangesTotal, nil, nil},
	{proxymetrics.SyncProxyRulesNoLocalEndpointsTotal, []string{LabelTrafficPolicy, LabelIPFamily}, nil},
	{proxymetrics.IPTablesRestoreFailuresTotal, []string{LabelIPFamily}, []proxy.Mode{proxy.ModeIPTables, proxy.ModeIPVS}},
	{proxymetrics.IPTablesPartialRestoreFailuresTotal, []string{LabelIPFamily}, []proxy.Mode{proxy.ModeIPTables}},
	{proxymetrics.IPTablesRulesTotal, []string{LabelTable, LabelIPFamily}, []proxy.Mode{proxy.ModeIPTables}},
	{proxymetrics.IPTablesRulesLastSync, []string{LabelTable, LabelIPFamily}, []proxy.Mode{proxy.ModeIPTables}},
	{proxymetrics.NFTablesSyncFailuresTotal, []string{LabelIPFamily}, []proxy.Mode{proxy.ModeNFTables}},
	{proxymetrics.NFTablesCleanupFailuresTotal, []string{LabelIPFamily}, []proxy.Mode{proxy.ModeNFTables}},
	{ReconcileConntrackFlowsLatency, []string{LabelIPFamily}, nil},
	{ReconcileConntrackFlowsDeletedEntriesTotal, []string{LabelIPFamily}, nil},
	{ProxyHealthzTotal, []string{LabelCode}, nil},
	{ProxyLivezTotal, []string{LabelCode}, nil},
	{proxymetrics.QuarantinedServicePorts, []string{LabelIPFamily}, nil},
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
