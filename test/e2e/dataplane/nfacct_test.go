package dataplane

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	F "github.com/svcproxy/svcproxy/test/e2e/framework"
)

const localhostAcceptedMetric = "kubeproxy_iptables_localhost_nodeports_accepted_packets_total"

// testLocalhostNodePortMetric is upstream's e2e "should update metric for
// tracking accepted packets destined for localhost nodeports"
// [Feature:KubeProxyNFAcct]: in iptables mode (localhostNodePorts is on by
// default), 10 requests from the node to 127.0.0.1:<nodePort> raise the
// metric by 10 or more. nftables mode has no such metric.
func testLocalhostNodePortMetric(t *testing.T, c *F.Cluster) {
	n1 := c.Nodes[0]
	if c.Opts.Mode != "iptables" {
		// The nfacct metrics belong to iptables mode: like upstream's,
		// another mode has no such family.
		text, err := c.Metrics(n1)
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(text, localhostAcceptedMetric) {
			t.Errorf("%s mode serves %s", c.Opts.Mode, localhostAcceptedMetric)
		}
		return
	}
	pod := c.AddPod(n1, "nm")
	svc := c.CreateService(F.NewService("lnp", corev1.ServiceTypeNodePort))
	c.SetEndpoints(svc, F.EP{Pod: pod})
	_, np := port(svc, corev1.ProtocolTCP)
	from, target := strings.TrimPrefix(n1.NS, c.Prefix), F.TCP("127.0.0.1", np)
	c.Expect(from, target, converge, F.OnlyBy("nm"))

	before := localhostAccepted(t, c, n1)
	for _, r := range c.Ask(from, target, 10, time.Second) {
		if !r.OK {
			t.Fatalf("%s from %s: %s", target, n1.Name, r)
		}
	}
	after := localhostAccepted(t, c, n1)
	t.Logf("%s: %v before, %v after 10 requests", localhostAcceptedMetric, before, after)
	if after < before+10 {
		t.Errorf("%s went from %v to %v, want +10 or more", localhostAcceptedMetric, before, after)
	}
}

// localhostAccepted scrapes n's localhost node port counter.
func localhostAccepted(t *testing.T, c *F.Cluster, n *F.Node) float64 {
	t.Helper()
	text, err := c.Metrics(n)
	if err != nil {
		t.Fatal(err)
	}
	v, err := sampleValue(text, localhostAcceptedMetric)
	if err != nil {
		t.Fatalf("%s: %v", n.Name, err)
	}
	return v
}

// sampleValue returns the value of the unlabelled sample name.
func sampleValue(text, name string) (float64, error) {
	for _, line := range strings.Split(text, "\n") {
		if v, ok := strings.CutPrefix(line, name+" "); ok {
			return strconv.ParseFloat(strings.TrimSpace(v), 64)
		}
	}
	return 0, fmt.Errorf("no sample of %s in /metrics", name)
}
