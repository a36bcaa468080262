package monitoring

import (
	"encoding/json"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// mixinConfig is what the kubernetes-mixin's config.libsonnet puts for its
// placeholders, and a value for each Grafana variable.
var mixinConfig = strings.NewReplacer(
	"%(clusterLabel)s", "cluster",
	"%(kubeProxySelector)s", `job="kube-proxy"`,
	"$__rate_interval", "5m",
	"$__interval", "5m",
	"$cluster", "c",
	"$instance", ".*",
)

// labelValues is Grafana's variable query label_values(selector, label).
var labelValues = regexp.MustCompile(`^label_values\((.*), *([a-zA-Z_]+)\)$`)

// checkDashboardQuery checks a dashboard's query with its placeholders
// and variables filled in; a variable's label_values(selector, label)
// becomes a lookup of the selector grouped by the label, which must exist.
func checkDashboardQuery(inv inventory, query string) (checked, error) {
	q := mixinConfig.Replace(query)
	if m := labelValues.FindStringSubmatch(q); m != nil {
		return checkLookup(inv, "group by ("+m[2]+") ("+m[1]+")")
	}
	return checkQuery(inv, q)
}

// mixinKnownGaps are the problems checkQuery finds in the mixin's queries,
// each also true of upstream kube-proxy: both serve client-go's request
// latency labelled by verb and host (component-base's adapter), not url, so
// those panels draw one line per verb. docs/user/troubleshooting.md says so.
var mixinKnownGaps = []string{
	`by (verb, url, le): rest_client_request_duration_seconds has no label "url"`,
	`by (verb, url, le): rest_client_request_duration_seconds has no label "url"`,
}

// TestMixinDashboardWorksUnchanged checks every query of the
// kubernetes-mixin's kube-proxy dashboard (testdata, copied from the
// mixin) against svcproxy's metrics: each one of the kube-proxy job must
// find what it selects, as its type allows.
func TestMixinDashboardWorksUnchanged(t *testing.T) {
	inv := loadInventory(t)
	data, err := os.ReadFile("testdata/kubernetes-mixin-proxy.txt")
	if err != nil {
		t.Fatal(err)
	}
	var problems, others []string
	queries := 0
	for line := range strings.Lines(string(data)) {
		line = strings.TrimSuffix(line, "\n")
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		fields := strings.Split(line, "\t")
		if len(fields) != 3 {
			t.Fatalf("testdata line %q: want kind, title, query", line)
		}
		queries++
		c, err := checkDashboardQuery(inv, fields[2])
		if err != nil {
			t.Errorf("%s %q: %v", fields[0], fields[1], err)
			continue
		}
		if fields[0] == "panel" && len(c.used) == 0 {
			t.Errorf("panel %q selects nothing of the kube-proxy job", fields[1])
		}
		problems = append(problems, c.problems...)
		others = append(others, c.others...)
	}
	if queries != 16 {
		t.Errorf("%d queries in the testdata, the dashboard has 16", queries)
	}
	if !slices.Equal(problems, mixinKnownGaps) {
		t.Errorf("problems %q, want exactly the known gaps %q", problems, mixinKnownGaps)
	}
	// The cluster variable reads kube-state-metrics, not kube-proxy.
	if !slices.Equal(others, []string{"kube_pod_info"}) {
		t.Errorf("selectors outside the kube-proxy job: %v", others)
	}
}

const ownDashboard = "../../deploy/monitoring/dashboards/svcproxy.json"

// grafanaDashboard is the part of a Grafana dashboard that holds queries.
type grafanaDashboard struct {
	Templating struct {
		List []struct {
			Name  string `json:"name"`
			Type  string `json:"type"`
			Query any    `json:"query"`
		} `json:"list"`
	} `json:"templating"`
	Panels []struct {
		Title   string `json:"title"`
		Targets []struct {
			Expr string `json:"expr"`
		} `json:"targets"`
	} `json:"panels"`
}

// TestOwnDashboardQueriesWhatSvcproxyServes checks svcproxy's own panels
// the same way, with no gap allowed, and that they show what the pack
// promises: quarantined ports, localhost node-port refusals, sync failures.
func TestOwnDashboardQueriesWhatSvcproxyServes(t *testing.T) {
	inv := loadInventory(t)
	data, err := os.ReadFile(ownDashboard)
	if err != nil {
		t.Fatal(err)
	}
	var d grafanaDashboard
	if err := json.Unmarshal(data, &d); err != nil {
		t.Fatal(err)
	}
	var queries []string
	for _, v := range d.Templating.List {
		if q, ok := v.Query.(map[string]any); ok && v.Type == "query" {
			queries = append(queries, q["query"].(string))
		}
	}
	for _, p := range d.Panels {
		for _, target := range p.Targets {
			queries = append(queries, target.Expr)
		}
	}
	used := map[string]bool{}
	for _, q := range queries {
		c, err := checkDashboardQuery(inv, q)
		if err != nil {
			t.Errorf("%q: %v", q, err)
			continue
		}
		for _, p := range c.problems {
			t.Errorf("%q: %s", q, p)
		}
		if len(c.others) > 0 || len(c.used) == 0 {
			t.Errorf("%q: selectors outside the kube-proxy job %v, inside %v", q, c.others, c.used)
		}
		for _, name := range c.used {
			used[name] = true
		}
	}
	for _, name := range []string{"svcproxy_quarantined_service_ports", "svcproxy_localhost_nodeport_refused_connections_total",
		"kubeproxy_sync_proxy_rules_nftables_sync_failures_total", "kubeproxy_sync_proxy_rules_iptables_restore_failures_total"} {
		if !used[name] {
			t.Errorf("no panel shows %s", name)
		}
	}
}
