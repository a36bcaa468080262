package app

import (
	"context"
	"encoding/json"
	"io"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/svcproxy/svcproxy/internal/debugstate"
	"github.com/svcproxy/svcproxy/internal/explain"
	"github.com/svcproxy/svcproxy/internal/nodestatus"
	"github.com/svcproxy/svcproxy/pkg/pipeline/desired"
	"github.com/svcproxy/svcproxy/pkg/pipeline/model"
	"github.com/svcproxy/svcproxy/pkg/proxy"
)

func runCommand(t *testing.T, args ...string) (string, error) {
	t.Helper()
	cmd := NewCommand()
	var out strings.Builder
	cmd.SetOut(&out)
	cmd.SetErr(io.Discard)
	cmd.SetArgs(args)
	err := cmd.ExecuteContext(context.Background())
	return out.String(), err
}

func webState() *desired.State {
	name := proxy.ServicePortName{ServiceName: proxy.ServiceName{Namespace: "shop", Name: "web"}, Port: "http", Protocol: proxy.TCP}
	ep := desired.Dispatch{Endpoints: []desired.Endpoint{{IP: netip.MustParseAddr("10.244.1.2"), Port: 8080}}}
	return &desired.State{Family: proxy.IPv4, NodePorts: desired.NodePortAddrs{All: true},
		Services: model.NewPortMap(map[proxy.ServicePortName]*desired.ServicePort{name: {Name: name, Protocol: proxy.TCP, Port: 80,
			ClusterIP: netip.MustParseAddr("10.96.0.10"), Internal: ep, External: ep, Cluster: ep}})}
}

// status and services read the daemon's socket: its mode and node, and
// the programmed service ports.
func TestStatusAndServicesCommands(t *testing.T) {
	rec := debugstate.NewRecorder()
	sock := explainSocket(t, rec)
	rec.Record(webState(), model.Changes{})
	out, err := runCommand(t, "status", "--state-socket", sock, "-o", "json")
	if err != nil {
		t.Fatal(err)
	}
	var s nodestatus.Status
	if err := json.Unmarshal([]byte(out), &s); err != nil || s.Mode != "nftables" || s.Node != "n1" || s.Version != Version {
		t.Errorf("status -o json: %+v, %v:\n%s", s, err, out)
	}
	if out, err = runCommand(t, "status", "--state-socket", sock); err != nil || !strings.Contains(out, "on node n1, mode nftables") {
		t.Errorf("status: %v:\n%s", err, out)
	}
	out, err = runCommand(t, "services", "--state-socket", sock)
	if err != nil || !strings.Contains(out, "shop/web:http  10.96.0.10  80/TCP   1          programmed") {
		t.Errorf("services: %v:\n%s", err, out)
	}
	if _, err := runCommand(t, "services", "--state-socket", sock, "-o", "yaml"); err == nil {
		t.Error("services -o yaml: no error")
	}
}

// explain on a quarantined port says so, whatever the programmed State
// shows for its address.
func TestExplainTellsQuarantined(t *testing.T) {
	state := webState()
	var bad desired.ServicePort
	for _, sp := range state.Services.All() {
		bad = *sp
	}
	bad.Name.Name, bad.ClusterIP = "bad", netip.MustParseAddr("10.96.0.30")
	wire := debugstate.EncodePort(&bad)
	since := time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC)
	status := nodestatus.Status{Families: []nodestatus.Family{{Family: proxy.IPv4, Quarantined: []nodestatus.Quarantined{
		{Namespace: "shop", Name: "bad", PortName: "http", Protocol: proxy.TCP, Error: "netlink: file exists",
			Since: since, Kernel: nodestatus.KernelServesNothing, Rejected: &wire}}}}}
	for _, tc := range []struct {
		dest        string
		quarantined bool
	}{{"10.96.0.30", true}, {"10.96.0.10", false}} {
		pkt := explain.Packet{Dest: netip.MustParseAddr(tc.dest), Port: 80, Protocol: proxy.TCP}
		e := explain.Explain(state, pkt)
		markQuarantined(&e, state, pkt, status)
		if (e.Quarantine != nil) != tc.quarantined {
			t.Errorf("%s: quarantine %+v, want quarantined %t", tc.dest, e.Quarantine, tc.quarantined)
		}
		if tc.quarantined && (e.Quarantine.ServicePort != "shop/bad:http" || !strings.Contains(strings.Join(e.Reasons, " "), "netlink: file exists")) {
			t.Errorf("%s: %+v", tc.dest, e)
		}
	}
}
