//go:build benche2e

package bench

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	F "github.com/svcproxy/svcproxy/test/e2e/framework"
)

// datapathResult is the new-connection rate through one ClusterIP.
type datapathResult struct {
	Rate       float64 // connections/s, each a connect + one HTTP request + close
	OK, Errors int
	CPUSeconds float64 // the proxy's during the measurement (expected ≈ 0)
}

// dpService is the one Service the datapath measurement adds to the seed.
const dpService = "bench-datapath"

// measureDatapath adds a server pod on the node and a Service for it, waits
// until the proxy has its ClusterIP in the kernel and then until the client
// pod (cli1, behind the same node) reaches it through it, then runs e2ectl
// rate there: -dp-conns connections in flight
// for -dp-duration, each a new connection (conntrack entry, NAT lookup
// through the proxy's rules). The same client, server and Service for
// every mode; the seeded Services are the rules the packet is looked up in.
func measureDatapath(t *testing.T, c *F.Cluster, n *F.Node) datapathResult {
	if *flagDPDuration <= 0 {
		return datapathResult{Rate: -1}
	}
	pod := c.AddPod(n, "dpsrv")
	svc := c.CreateService(F.NewService(dpService, corev1.ServiceTypeClusterIP))
	c.SetEndpoints(svc, F.EP{Pod: pod})
	target := F.TCP(svc.Spec.ClusterIP, 80)
	// No probe before the rules: a SYN the proxy has not DNATed yet leaves
	// the node for the ClusterIP itself and a conntrack entry that lives
	// 120 s; the rate test reuses its source port within seconds, and that
	// connection fails ("no route to host"), whatever the proxy does then.
	waitInKernel(t, c, n, svc.Spec.ClusterIP)
	if err := c.Eventually("cli1", target, 3, 2*time.Minute, F.OnlyBy(pod.Name)); err != nil {
		t.Fatalf("datapath Service not reachable: %v", err)
	}
	cpu0 := cpuSeconds(n.Proxy.Pid())
	ctx, cancel := context.WithTimeout(context.Background(), *flagDPDuration+time.Minute)
	defer cancel()
	out, err := F.InNS(ctx, c.NS("cli1"), c.Bins.E2ECtl, "rate", "-addr", target.Addr,
		"-conns", strconv.Itoa(*flagDPConns), "-duration", flagDPDuration.String())
	if err != nil {
		t.Fatalf("e2ectl rate: %v: %s", err, out)
	}
	res, err := parseRate(string(out))
	if err != nil {
		t.Fatal(err)
	}
	res.CPUSeconds = cpuSeconds(n.Proxy.Pid()) - cpu0
	t.Logf("datapath: %s", strings.TrimSpace(string(out)))
	return res
}

// parseRate reads e2ectl rate's line.
func parseRate(out string) (datapathResult, error) {
	var r datapathResult
	var secs float64
	if _, err := fmt.Sscanf(out, "rate %f ok %d errors %d seconds %f", &r.Rate, &r.OK, &r.Errors, &secs); err != nil {
		return r, fmt.Errorf("parsing e2ectl rate's %q: %w", out, err)
	}
	return r, nil
}

// waitInKernel polls the node's rules until they hold ip, then waits a
// second more: the proxy's transaction order puts the frontend last, and
// a layout may hold the address elsewhere first.
func waitInKernel(t *testing.T, c *F.Cluster, n *F.Node, ip string) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for {
		dump, err := dumpRules(ctx, c.Opts.Mode, n)
		if err == nil && foundIPs(dump, map[string]bool{ip: true})[ip] {
			time.Sleep(time.Second)
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("ClusterIP %s not in the node's rules after 2 min (last error: %v)", ip, err)
		case <-time.After(200 * time.Millisecond):
		}
	}
}
