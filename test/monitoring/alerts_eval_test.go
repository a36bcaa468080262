package monitoring

import (
	"context"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/promql/parser"
	"github.com/prometheus/prometheus/promql/promqltest"
	"github.com/prometheus/prometheus/rules"
)

// alertCase is a node's history, as the series Prometheus would hold, and
// when the alert must fire: the first minute of firing, or never (-1).
type alertCase struct {
	alert, name string
	// series are promqltest "load 1m" lines; every series also gets the
	// labels in common.
	series []string
	firing int
}

const common = `job="kube-proxy", instance="node-1:10249", ip_family="IPv4"`

// neverFires is alertCase.firing for a history that must not alert.
const neverFires = -1

var alertCases = []alertCase{
	{"SvcproxySyncStale", "an idle node synced an hour ago", []string{
		`kubeproxy_sync_proxy_rules_last_timestamp_seconds{%s} 0x90`,
		`kubeproxy_sync_proxy_rules_last_queued_timestamp_seconds{%s} 0x90`}, neverFires},
	{"SvcproxySyncStale", "a change after an idle hour, synced at once", []string{
		`kubeproxy_sync_proxy_rules_last_timestamp_seconds{%s} 0x60 3601x30`,
		`kubeproxy_sync_proxy_rules_last_queued_timestamp_seconds{%s} 0x59 3600x31`}, neverFires},
	{"SvcproxySyncStale", "changes every minute, each synced within 45 s", []string{
		`kubeproxy_sync_proxy_rules_last_timestamp_seconds{%s} 31+60x30`,
		`kubeproxy_sync_proxy_rules_last_queued_timestamp_seconds{%s} 45+60x30`}, neverFires},
	{"SvcproxySyncStale", "a change waiting with no sync since", []string{
		`kubeproxy_sync_proxy_rules_last_timestamp_seconds{%s} 0x30`,
		`kubeproxy_sync_proxy_rules_last_queued_timestamp_seconds{%s} 0 60x29`}, 11},
	{"SvcproxySyncStale", "a family that never synced", []string{
		`kubeproxy_sync_proxy_rules_last_queued_timestamp_seconds{%s} 0x20`}, 5},
	{"SvcproxySyncFailing", "one failed sync, then success", []string{
		`kubeproxy_sync_proxy_rules_nftables_sync_failures_total{%s} 0x5 1x40`}, neverFires},
	{"SvcproxySyncFailing", "nftables syncs failing every minute", []string{
		`kubeproxy_sync_proxy_rules_nftables_sync_failures_total{%s} 0+1x40`}, 16},
	{"SvcproxySyncFailing", "iptables restores failing, the counter born at the first failure", []string{
		`kubeproxy_sync_proxy_rules_iptables_restore_failures_total{%s} _x5 1+1x40`}, 21},
	{"SvcproxyServicePortsQuarantined", "a port quarantined at minute 6", []string{
		`svcproxy_quarantined_service_ports{%s} 0x5 1x10`}, 7},
	{"SvcproxyServicePortsQuarantined", "nothing quarantined", []string{
		`svcproxy_quarantined_service_ports{%s} 0x20`}, neverFires},
	{"SvcproxyUnhealthy", "/livez failing every probe", []string{
		`kubeproxy_proxy_livez_total{%s, code="503"} 0+6x20`}, 6},
	{"SvcproxyUnhealthy", "/livez answering 200", []string{
		`kubeproxy_proxy_livez_total{%s, code="200"} 0+6x20`}, neverFires},
	{"SvcproxyLocalhostNodePortRefusals", "a node port at its cap", []string{
		`svcproxy_localhost_nodeport_refused_connections_total{%s, reason="port_limit"} 0x3 5x10`}, 4},
	{"SvcproxyLocalhostNodePortRefusals", "a port without endpoints", []string{
		`svcproxy_localhost_nodeport_refused_connections_total{%s, reason="no_endpoints"} 0+1x20`}, neverFires},
	{"SvcproxyLocalhostNodePortBindFailing", "a node port taken on loopback", []string{
		`kubeproxy_nftables_localhost_nodeport_listener_creation_failures_total{%s} 0x3 1x10`}, 4},
	{"SvcproxyInstanceDown", "a target not answering", []string{`up{%s} 0x20`}, 10},
	{"SvcproxyDown", "no target up", []string{`up{%s} 0x20`}, 15},
	{"SvcproxyDown", "a target up", []string{`up{%s} 1x50`}, neverFires},
	{"SvcproxyNetworkProgrammingSlow", "changes programmed in 30 to 60 s", []string{
		`kubeproxy_network_programming_duration_seconds_bucket{%s, le="30"} 0x30`,
		`kubeproxy_network_programming_duration_seconds_bucket{%s, le="60"} 0+10x30`,
		`kubeproxy_network_programming_duration_seconds_bucket{%s, le="+Inf"} 0+10x30`}, 16},
	{"SvcproxyNetworkProgrammingSlow", "changes programmed within 30 s", []string{
		`kubeproxy_network_programming_duration_seconds_bucket{%s, le="30"} 0+10x30`,
		`kubeproxy_network_programming_duration_seconds_bucket{%s, le="60"} 0+10x30`,
		`kubeproxy_network_programming_duration_seconds_bucket{%s, le="+Inf"} 0+10x30`}, neverFires},
}

// TestAlertsFireWhenTheyShould evaluates each alert of prometheusrule.yaml
// as Prometheus' rule manager does (its expression, for, and annotation
// templates), once a minute over a node's history, and checks when it
// starts firing.
func TestAlertsFireWhenTheyShould(t *testing.T) {
	byName := map[string]rule{}
	for _, r := range loadRules(t) {
		byName[r.Alert] = r
	}
	fires := map[string]bool{}
	for _, tc := range alertCases {
		r, ok := byName[tc.alert]
		if !ok {
			t.Fatalf("no alert %s", tc.alert)
		}
		fires[tc.alert] = fires[tc.alert] || tc.firing != neverFires
		t.Run(tc.alert+"/"+tc.name, func(t *testing.T) {
			if got := firstFiring(t, r, tc.series, 45); got != tc.firing {
				t.Errorf("first fires at minute %d, want %d (-1: never)", got, tc.firing)
			}
		})
	}
	// A firing case also expands the alert's annotations.
	for name := range byName {
		if !fires[name] {
			t.Errorf("alert %s has no case where it fires", name)
		}
	}
}

// firstFiring loads series, evaluates r every minute up to minutes, and
// returns the first minute it fires (-1: never). Each annotation of a
// firing alert must expand without error.
func firstFiring(t *testing.T, r rule, series []string, minutes int) int {
	t.Helper()
	var load strings.Builder
	load.WriteString("load 1m\n")
	for _, s := range series {
		load.WriteString("  " + strings.ReplaceAll(s, "%s", common) + "\n")
	}
	storage := promqltest.LoadedStorage(t, load.String())
	engine := promqltest.NewTestEngine(t, false, 5*time.Minute, 100000)
	query := rules.EngineQueryFunc(engine, storage)
	ar := newAlertingRule(t, r)
	for m := 0; m <= minutes; m++ {
		if _, err := ar.Eval(context.Background(), 0, time.Unix(int64(m)*60, 0), query, nil, 0); err != nil {
			t.Fatalf("minute %d: %v", m, err)
		}
		for _, a := range ar.ActiveAlerts() {
			if a.State != rules.StateFiring {
				continue
			}
			a.Annotations.Range(func(l labels.Label) {
				if strings.Contains(l.Value, "error expanding template") {
					t.Errorf("annotation %s: %s", l.Name, l.Value)
				}
			})
			return m
		}
	}
	return neverFires
}

func newAlertingRule(t *testing.T, r rule) *rules.AlertingRule {
	t.Helper()
	expr, err := parser.NewParser(parser.Options{}).ParseExpr(r.Expr)
	if err != nil {
		t.Fatal(err)
	}
	var hold model.Duration
	if r.For != "" {
		if hold, err = model.ParseDuration(r.For); err != nil {
			t.Fatal(err)
		}
	}
	return rules.NewAlertingRule(r.Alert, expr, time.Duration(hold), 0, labels.FromMap(r.Labels),
		labels.FromMap(r.Annotations), labels.EmptyLabels(), "", true, slog.New(slog.NewTextHandler(io.Discard, nil)))
}
