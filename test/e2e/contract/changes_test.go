package contract

import (
	"fmt"
	"regexp"
	"strconv"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	F "github.com/svcproxy/svcproxy/test/e2e/framework"
)

// changeCounters are the families whose values, not only shapes, must
// agree: upstream counts every Service and EndpointSlice event its
// trackers take, so after the same API events both proxies hold the same
// numbers.
var changeCounters = []string{
	"kubeproxy_sync_proxy_rules_service_changes_total",
	"kubeproxy_sync_proxy_rules_endpoint_changes_total",
}

// compareChangeCounters gives both proxies the same events — a Service
// update that changes nothing proxied (a label) and an EndpointSlice update
// (a label on the slice) — and compares the counters' values once both
// stopped moving. touch distinguishes the calls' labels.
func compareChangeCounters(t *testing.T, c *F.Cluster, up, ours *F.Node, svc *corev1.Service, eps []F.EP, touch int, diffs *differences) {
	label := fmt.Sprintf("touch-%d", touch)
	c.UpdateService(svc.Name, func(s *corev1.Service) {
		if s.Labels == nil {
			s.Labels = map[string]string{}
		}
		s.Labels["contract-touch"] = label
	})
	slice := F.Slice(svc, eps...)
	slice.Labels["contract-touch"] = label
	if err := c.ApplySlice(slice); err != nil {
		t.Fatal(err)
	}
	var u, o map[string]float64
	deadline := time.Now().Add(20 * time.Second)
	for {
		u, o = counterValues(t, c, up), counterValues(t, c, ours)
		if fmt.Sprint(u) == fmt.Sprint(o) || time.Now().After(deadline) {
			break
		}
		time.Sleep(500 * time.Millisecond)
	}
	t.Logf("change counters after the same events: upstream %v, svcproxy %v", u, o)
	for _, name := range changeCounters {
		var found []string
		if u[name] != o[name] {
			found = []string{fmt.Sprintf("upstream %v, svcproxy %v", u[name], o[name])}
		}
		diffs.report(t, "metric "+name+" value", found)
	}
}

// counterValues reads the change counters of n's /metrics.
func counterValues(t *testing.T, c *F.Cluster, n *F.Node) map[string]float64 {
	t.Helper()
	text, err := c.Metrics(n)
	if err != nil {
		t.Fatalf("%s /metrics: %v", n.Name, err)
	}
	values := map[string]float64{}
	for _, name := range changeCounters {
		m := regexp.MustCompile(`(?m)^` + name + ` (\S+)$`).FindStringSubmatch(text)
		if m == nil {
			t.Fatalf("%s /metrics has no sample of %s", n.Name, name)
		}
		v, err := strconv.ParseFloat(m[1], 64)
		if err != nil {
			t.Fatalf("%s %s: %v", n.Name, name, err)
		}
		values[name] = v
	}
	return values
}
