// Package metrics defines the families the pipeline updates — the syncer's
// (sync.go) and the backends' own — under upstream kube-proxy's exact name,
// type, help and labels (svcproxy's own under the svcproxy_ prefix), and the
// nfacct counters the iptables backend counts into.
//
// internal/metrics registers these beside the families the health servers
// and the conntrack reconciler update, and serves them all. The pipeline's
// families live here, not there, so that pkg/ imports nothing from
// internal/; like upstream's, the collectors are package variables.
package metrics

import (
	"github.com/prometheus/client_golang/prometheus"
)

// Subsystem prefixes every kubeproxy_* family.
const Subsystem = "kubeproxy"

// Label names of the backends' families.
const (
	LabelIPFamily = "ip_family"
	LabelTable    = "table"
)

// Alpha marks help text the way component-base's registry does for ALPHA
// metrics (every kubeproxy_* family upstream is ALPHA); scrapers and
// linters that read the HELP lines see the same text.
func Alpha(help string) string { return "[ALPHA] " + help }

// NewGaugeVec returns the ALPHA gauge family kubeproxy_<name>.
func NewGaugeVec(name, help string, labels ...string) *prometheus.GaugeVec {
	return prometheus.NewGaugeVec(prometheus.GaugeOpts{Subsystem: Subsystem, Name: name, Help: Alpha(help)}, labels)
}

// NewHistogramVec returns the ALPHA histogram family kubeproxy_<name>.
func NewHistogramVec(name, help string, buckets []float64, labels ...string) *prometheus.HistogramVec {
	return prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Subsystem: Subsystem, Name: name, Help: Alpha(help), Buckets: buckets,
	}, labels)
}

// NewCounterVec returns the ALPHA counter family kubeproxy_<name>.
func NewCounterVec(name, help string, labels ...string) *prometheus.CounterVec {
	return prometheus.NewCounterVec(prometheus.CounterOpts{Subsystem: Subsystem, Name: name, Help: Alpha(help)}, labels)
}

// The families the backends update; ip_family takes "IPv4" or "IPv6",
// table "filter" or "nat".
var (
	// IPTablesPartialRestoreFailuresTotal counts partial restores that failed
	// and fell back to a full restore.
	IPTablesPartialRestoreFailuresTotal = NewCounterVec("sync_proxy_rules_iptables_partial_restore_failures_total",
		"Cumulative proxy iptables partial restore failures", LabelIPFamily)
	// IPTablesRulesTotal is the number of rules owned per table ("filter", "nat").
	IPTablesRulesTotal = NewGaugeVec("sync_proxy_rules_iptables_total",
		"Total number of iptables rules owned by kube-proxy", LabelTable, LabelIPFamily)
	// IPTablesRulesLastSync is the number of rules written by the last sync per table.
	IPTablesRulesLastSync = NewGaugeVec("sync_proxy_rules_iptables_last",
		"Number of iptables rules written by kube-proxy in last sync", LabelTable, LabelIPFamily)
	// NFTablesCleanupFailuresTotal counts failed cleanups of stale nftables objects.
	NFTablesCleanupFailuresTotal = NewCounterVec("sync_proxy_rules_nftables_cleanup_failures_total",
		"Cumulative proxy nftables cleanup failures", LabelIPFamily)
)
