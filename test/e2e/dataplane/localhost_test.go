package dataplane

import (
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	F "github.com/svcproxy/svcproxy/test/e2e/framework"
)

// localhostConfig turns on upstream's alpha localhost node ports (KEP-6032)
// with loopback named in nodePortAddresses, so the userspace proxy runs.
const localhostConfig = `featureGates:
  KubeProxyNFTablesLocalhostNodePorts: true
nodePortAddresses: [primary, localhost]
`

// TestLocalhostNodePorts: nftables mode with the gate on, through the API.
// A client on the node itself reaches a NodePort Service's pods (on both
// nodes) at 127.0.0.1:<nodePort> through the userspace proxy, UDP there is
// refused and counted, the node IP still serves through the table, the
// listener goes when the endpoints do, and /metrics shows upstream's
// families. Its own cluster: the rest of the suite runs with the gate off.
// It runs whatever E2E_MODES says: the gate exists in nftables mode only.
func TestLocalhostNodePorts(t *testing.T) {
	c := F.New(t, F.Options{Mode: "nftables", ExtraConfig: localhostConfig})
	defer c.Close()
	n1 := c.Nodes[0]
	a, b := c.AddPod(n1, "la"), c.AddPod(c.Nodes[1], "lb")
	svc := c.CreateService(F.NewService("lnp", corev1.ServiceTypeNodePort))
	c.SetEndpoints(svc, F.EP{Pod: a}, F.EP{Pod: b})
	_, tcp := port(svc, corev1.ProtocolTCP)
	_, udp := port(svc, corev1.ProtocolUDP)
	node := strings.TrimPrefix(n1.NS, c.Prefix)

	both := F.AllOf("la", "lb")
	c.Expect(node, F.TCP("127.0.0.1", tcp), converge, both)
	c.Expect(node, F.UDP("127.0.0.1", udp), converge, F.Refused())
	c.Expect("ext", F.TCP(n1.IP, tcp), converge, both)

	text, err := c.Metrics(n1)
	if err != nil {
		t.Fatalf("/metrics: %v", err)
	}
	if v := sample(text, `kubeproxy_nftables_localhost_nodeport_listeners{ip_family="IPv4"}`); v != 1 {
		t.Errorf("listeners = %v, want 1\n%s", v, grepLines(text, "localhost"))
	}
	if v := sample(text, `kubeproxy_nftables_localhost_nodeport_rejected_packets_total{ip_family="IPv4",protocol="UDP"}`); v < 1 {
		t.Errorf("rejected UDP packets = %v, want ≥ 1\n%s", v, grepLines(text, "localhost"))
	}

	// No endpoints: the proxy keeps the port's listener through a grace
	// period (localnodeport.DefaultEmptyGrace), resetting new connections,
	// then closes it, and the kernel refuses the connection.
	c.SetEndpoints(svc)
	c.Expect(node, F.TCP("127.0.0.1", tcp), emptyEndpointsGrace+converge, F.Refused())
}

// emptyEndpointsGrace is how long the localhost node-port proxy keeps the
// listener of a port whose endpoints all went (internal/localnodeport's
// default, which this module cannot import).
const emptyEndpointsGrace = 30 * time.Second

// sample returns the value of the exposition line that starts with series,
// or -1 when there is none.
func sample(text, series string) float64 {
	re := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(series) + ` (\S+)$`)
	m := re.FindStringSubmatch(text)
	if m == nil {
		return -1
	}
	v, err := strconv.ParseFloat(m[1], 64)
	if err != nil {
		return -1
	}
	return v
}

func grepLines(text, word string) string {
	var out []string
	for _, l := range strings.Split(text, "\n") {
		if strings.Contains(l, word) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
