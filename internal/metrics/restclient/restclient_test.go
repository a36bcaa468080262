package restclient

import (
	"context"
	"net/url"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	clientmetrics "k8s.io/client-go/tools/metrics"
)

func TestClientGoRequestsFeedRestClientFamilies(t *testing.T) {
	reg := prometheus.NewRegistry()
	if err := Register(reg); err != nil {
		t.Fatal(err)
	}
	u := url.URL{Scheme: "https", Host: "10.0.0.1:6443", Path: "/api"}
	clientmetrics.RequestResult.Increment(context.Background(), "200", "GET", "10.0.0.1:6443")
	clientmetrics.RequestLatency.Observe(context.Background(), "GET", u, 250*time.Millisecond)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	found := map[string]bool{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			found[mf.GetName()] = true
			for _, l := range m.GetLabel() {
				if l.GetName() == "host" && l.GetValue() != "10.0.0.1:6443" {
					t.Errorf("%s: host label %q", mf.GetName(), l.GetValue())
				}
			}
		}
	}
	if !found["rest_client_requests_total"] || !found["rest_client_request_duration_seconds"] {
		t.Errorf("rest_client families not fed by client-go: %v", found)
	}
}
