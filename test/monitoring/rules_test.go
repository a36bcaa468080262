package monitoring

import (
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/common/model"
	"sigs.k8s.io/yaml"
)

const (
	rulesFile       = "../../deploy/monitoring/prometheusrule.yaml"
	troubleshooting = "../../docs/user/troubleshooting.md"
	// runbookBase is where the alerts' runbook_url point.
	runbookBase = "https://github.com/svcproxy/svcproxy/blob/main/docs/user/troubleshooting.md#"
)

// prometheusRule is the part of monitoring.coreos.com/v1 PrometheusRule
// that the file uses, decoded strictly.
type prometheusRule struct {
	APIVersion string         `json:"apiVersion"`
	Kind       string         `json:"kind"`
	Metadata   map[string]any `json:"metadata"`
	Spec       struct {
		Groups []struct {
			Name  string `json:"name"`
			Rules []rule `json:"rules"`
		} `json:"groups"`
	} `json:"spec"`
}

type rule struct {
	Alert       string            `json:"alert"`
	Expr        string            `json:"expr"`
	For         string            `json:"for"`
	Labels      map[string]string `json:"labels"`
	Annotations map[string]string `json:"annotations"`
}

func loadRules(t *testing.T) []rule {
	t.Helper()
	data, err := os.ReadFile(rulesFile)
	if err != nil {
		t.Fatal(err)
	}
	var pr prometheusRule
	if err := yaml.UnmarshalStrict(data, &pr); err != nil {
		t.Fatalf("%s: %v", rulesFile, err)
	}
	if pr.APIVersion != "monitoring.coreos.com/v1" || pr.Kind != "PrometheusRule" || len(pr.Spec.Groups) == 0 {
		t.Fatalf("%s: %s %s with %d groups", rulesFile, pr.APIVersion, pr.Kind, len(pr.Spec.Groups))
	}
	var rules []rule
	for _, g := range pr.Spec.Groups {
		rules = append(rules, g.Rules...)
	}
	return rules
}

// TestAlertsQueryWhatSvcproxyServes parses every alert's expression and
// checks each selector against svcproxy's metrics: all select the
// kube-proxy job, and use what svcproxy serves as its type allows.
func TestAlertsQueryWhatSvcproxyServes(t *testing.T) {
	inv := loadInventory(t)
	for _, r := range loadRules(t) {
		c, err := checkQuery(inv, r.Expr)
		if err != nil {
			t.Errorf("%s: %v", r.Alert, err)
			continue
		}
		for _, p := range c.problems {
			t.Errorf("%s: %s", r.Alert, p)
		}
		if len(c.others) > 0 {
			t.Errorf("%s: selectors %v lack job=%q", r.Alert, c.others, kubeProxyJob)
		}
		if len(c.used) == 0 {
			t.Errorf("%s selects nothing", r.Alert)
		}
	}
}

// TestAlertsCoverTheOperatorsQuestions keeps the alerts this pack exists
// for: each metric below must be read by some alert.
func TestAlertsCoverTheOperatorsQuestions(t *testing.T) {
	inv := loadInventory(t)
	used := map[string]bool{}
	for _, r := range loadRules(t) {
		c, err := checkQuery(inv, r.Expr)
		if err != nil {
			t.Fatal(err)
		}
		for _, name := range c.used {
			used[name] = true
		}
	}
	for _, name := range []string{
		"up", // down
		"kubeproxy_sync_proxy_rules_last_timestamp_seconds",        // stale
		"kubeproxy_sync_proxy_rules_last_queued_timestamp_seconds", // stale
		"kubeproxy_sync_proxy_rules_nftables_sync_failures_total",  // failures
		"kubeproxy_sync_proxy_rules_iptables_restore_failures_total",
		"svcproxy_quarantined_service_ports",
		"kubeproxy_network_programming_duration_seconds_bucket",
		"kubeproxy_proxy_livez_total", // health
		"svcproxy_localhost_nodeport_refused_connections_total",
	} {
		if !used[name] {
			t.Errorf("no alert reads %s", name)
		}
	}
}

var alertName = regexp.MustCompile(`^Svcproxy[A-Z][A-Za-z]+$`)

// TestAlertsAreDocumented checks each alert's form: a name of its own,
// severity, summary, description, a valid for, and a runbook_url to its
// section of docs/user/troubleshooting.md.
func TestAlertsAreDocumented(t *testing.T) {
	doc, err := os.ReadFile(troubleshooting)
	if err != nil {
		t.Fatal(err)
	}
	anchors := headingAnchors(string(doc))
	seen := map[string]bool{}
	for _, r := range loadRules(t) {
		if !alertName.MatchString(r.Alert) || seen[r.Alert] {
			t.Errorf("alert %q: want a unique name Svcproxy…", r.Alert)
		}
		seen[r.Alert] = true
		if s := r.Labels["severity"]; s != "critical" && s != "warning" {
			t.Errorf("%s: severity %q", r.Alert, s)
		}
		if r.For != "" {
			if _, err := model.ParseDuration(r.For); err != nil {
				t.Errorf("%s: for %q: %v", r.Alert, r.For, err)
			}
		}
		// TestAlertsFireWhenTheyShould expands them.
		for _, key := range []string{"summary", "description"} {
			if r.Annotations[key] == "" {
				t.Errorf("%s: no %s", r.Alert, key)
			}
		}
		anchor := strings.ToLower(r.Alert)
		if r.Annotations["runbook_url"] != runbookBase+anchor {
			t.Errorf("%s: runbook_url %q, want %q", r.Alert, r.Annotations["runbook_url"], runbookBase+anchor)
		}
		if !anchors[anchor] {
			t.Errorf("%s: docs/user/troubleshooting.md has no section %q", r.Alert, r.Alert)
		}
	}
}

// headingAnchors are the anchors GitHub gives a Markdown file's headings.
func headingAnchors(doc string) map[string]bool {
	anchors := map[string]bool{}
	drop := regexp.MustCompile(`[^a-z0-9 _-]`)
	for line := range strings.Lines(doc) {
		title, ok := strings.CutPrefix(strings.TrimLeft(line, "#"), " ")
		if !ok || !strings.HasPrefix(line, "#") {
			continue
		}
		slug := drop.ReplaceAllString(strings.ToLower(strings.TrimSpace(title)), "")
		anchors[strings.ReplaceAll(slug, " ", "-")] = true
	}
	return anchors
}

// TestCheckQueryFindsMisuse keeps the checker honest: each query here
// misuses a metric of svcproxy's, and checkQuery must say so.
func TestCheckQueryFindsMisuse(t *testing.T) {
	inv := loadInventory(t)
	for _, tc := range []struct{ query, want string }{
		{`nosuch_metric{job="kube-proxy"}`, "serves no such metric"},
		{`svcproxy_quarantined_service_ports{job="kube-proxy", node_name="a"}`, `no label "node_name"`},
		{`rate(svcproxy_quarantined_service_ports{job="kube-proxy"}[5m])`, "is a gauge: rate()"},
		{`kubeproxy_sync_proxy_rules_nftables_sync_failures_total{job="kube-proxy"} > 0`, "only grows"},
		{`kubeproxy_network_programming_duration_seconds{job="kube-proxy"}`, "is a histogram"},
		{`histogram_quantile(0.99, sum by (job) (rate(kubeproxy_network_programming_duration_seconds_bucket{job="kube-proxy"}[5m])))`, "need le"},
		{`sum by (reason) (svcproxy_quarantined_service_ports{job="kube-proxy"})`, `no label "reason"`},
		{`kubeproxy_network_programming_duration_seconds_sum{job="kube-proxy", le="1"}`, `no label "le"`},
	} {
		c, err := checkQuery(inv, tc.query)
		if err != nil {
			t.Fatalf("%s: %v", tc.query, err)
		}
		if !slices.ContainsFunc(c.problems, func(p string) bool { return strings.Contains(p, tc.want) }) {
			t.Errorf("%s: problems %q, want one saying %q", tc.query, c.problems, tc.want)
		}
	}
	if c, _ := checkQuery(inv, `up{job="other"} == 0`); len(c.used) != 0 || len(c.others) != 1 {
		t.Errorf("a selector of another job: used %v, others %v", c.used, c.others)
	}
}
