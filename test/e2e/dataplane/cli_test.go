package dataplane

import (
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	F "github.com/svcproxy/svcproxy/test/e2e/framework"
)

// svcproxyCLI runs `svcproxy ARGS --state-socket <n's socket>` inside node
// n's namespace, as an operator would on the node, and returns its output.
func svcproxyCLI(c *F.Cluster, n *F.Node, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	argv := append([]string{"netns", "exec", n.NS, c.Bins.SvcProxy}, args...)
	cmd := exec.CommandContext(ctx, "ip", append(argv, "--state-socket", n.StateSocket)...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return string(out), fmt.Errorf("svcproxy %s on %s: %w: %s", strings.Join(args, " "), n.Name, err, strings.TrimSpace(stderr.String()))
	}
	return string(out), nil
}

// cliStatus is the part of `svcproxy status -o json` the scenarios check.
type cliStatus struct {
	Mode     string `json:"mode"`
	Node     string `json:"node"`
	Healthy  bool   `json:"healthy"`
	Families []struct {
		Family       string  `json:"family"`
		LastSync     *string `json:"lastSync"`
		ServicePorts int     `json:"servicePorts"`
		Quarantined  []struct {
			Name   string `json:"name"`
			Error  string `json:"error"`
			Kernel string `json:"kernel"`
		} `json:"quarantined"`
	} `json:"families"`
}

// expectCLIShowsQuarantine checks, on node n, that `svcproxy status` and
// `svcproxy services` show Service poison quarantined (with the kernel's
// error) beside healthy programmed ones, that the default table fits 80
// columns, and that `svcproxy explain` on the poison's cluster IP says it
// is quarantined.
func expectCLIShowsQuarantine(t *testing.T, c *F.Cluster, n *F.Node, poison, poisonIP, healthy string) {
	t.Helper()
	out, err := svcproxyCLI(c, n, "status", "-o", "json")
	if err != nil {
		t.Fatal(err)
	}
	var s cliStatus
	if err := json.Unmarshal([]byte(out), &s); err != nil {
		t.Fatalf("status -o json: %v:\n%s", err, out)
	}
	if s.Mode != c.Opts.Mode || s.Node != n.Name || len(s.Families) != 2 {
		t.Errorf("status: mode %q node %q, %d families; want %s on %s, both families", s.Mode, s.Node, len(s.Families), c.Opts.Mode, n.Name)
	}
	found := false
	for _, f := range s.Families {
		if f.LastSync == nil || (f.Family == "IPv4" && f.ServicePorts == 0) {
			t.Errorf("status, %s: no successful sync, or no IPv4 service port: %s", f.Family, out)
		}
		for _, q := range f.Quarantined {
			found = found || (q.Name == poison && q.Error != "" && q.Kernel != "")
		}
	}
	if !found {
		t.Errorf("status does not show %s quarantined with the kernel's error:\n%s", poison, out)
	}
	text, err := svcproxyCLI(c, n, "services")
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.Lines(text) {
		if len(strings.TrimRight(line, "\n")) > 80 {
			t.Errorf("services: a line wider than 80 columns: %q", line)
		}
		if strings.Contains(line, "/"+poison) && !strings.Contains(line, "quarantined") {
			t.Errorf("services: %s not shown quarantined: %q", poison, line)
		}
		if strings.Contains(line, "/"+healthy) && !strings.Contains(line, "programmed") {
			t.Errorf("services: %s not shown programmed: %q", healthy, line)
		}
	}
	if !strings.Contains(text, "/"+poison) || !strings.Contains(text, "/"+healthy) {
		t.Errorf("services lacks %s or %s:\n%s", poison, healthy, text)
	}
	wide, err := svcproxyCLI(c, n, "services", "--quarantined", "-o", "wide")
	if err != nil || strings.Contains(wide, "/"+healthy) || !strings.Contains(wide, "kernel serves") {
		t.Errorf("services --quarantined -o wide (%v): want only %s, with the kernel's error:\n%s", err, poison, wide)
	}
	r, err := explainOn(c, n, F.TCP(poisonIP, 80))
	if err != nil || r.Quarantine == nil {
		t.Errorf("explain %s (%v): no quarantine in %s", poisonIP, err, r)
	}
}
