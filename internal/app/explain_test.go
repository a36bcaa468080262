package app

import (
	"encoding/json"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/svcproxy/svcproxy/internal/debugstate"
	"github.com/svcproxy/svcproxy/internal/explain"
	"github.com/svcproxy/svcproxy/internal/healthz"
	"github.com/svcproxy/svcproxy/pkg/pipeline/desired"
	"github.com/svcproxy/svcproxy/pkg/pipeline/model"
	"github.com/svcproxy/svcproxy/pkg/proxy"
)

// explainSocket serves rec as the daemon does (serveLocal) on a unix socket
// in a fresh directory and returns the socket's path.
func explainSocket(t *testing.T, rec *debugstate.Recorder) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "run", "svcproxy.sock")
	d := &daemon{cfg: mustRun(t, "--hostname-override=n1", "--proxy-mode=nftables", "--state-socket="+path),
		logger: klog.Background(), state: rec, nodeName: "n1", health: healthz.New(time.Minute, clock.RealClock{})}
	t.Cleanup(d.serveLocal())
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("serveLocal: %v", err)
	}
	return path
}

func runExplain(t *testing.T, args ...string) (string, error) {
	t.Helper()
	return runCommand(t, append([]string{"explain"}, args...)...)
}

func TestExplainCommand(t *testing.T) {
	rec := debugstate.NewRecorder()
	sock := explainSocket(t, rec)
	if _, err := runExplain(t, "10.96.0.10:53/UDP", "--state-socket", sock); err == nil || !strings.Contains(err.Error(), "no successful sync") {
		t.Errorf("before a sync: err = %v", err)
	}
	name := proxy.ServicePortName{ServiceName: proxy.ServiceName{Namespace: "kube-system", Name: "kube-dns"}, Port: "dns", Protocol: proxy.UDP}
	ep := desired.Dispatch{Endpoints: []desired.Endpoint{{IP: netip.MustParseAddr("10.244.1.2"), Port: 53}}}
	rec.Record(&desired.State{
		Family: proxy.IPv4, NodePorts: desired.NodePortAddrs{All: true},
		Masquerade: desired.Masquerade{Mark: 0x4000, Local: desired.LocalDetector{Mode: desired.LocalCIDR,
			CIDRs: []netip.Prefix{netip.MustParsePrefix("10.244.0.0/16")}}},
		Services: model.NewPortMap(map[proxy.ServicePortName]*desired.ServicePort{name: {Name: name, Protocol: proxy.UDP, Port: 53,
			ClusterIP: netip.MustParseAddr("10.96.0.10"), Internal: ep, External: ep, Cluster: ep}}),
	}, model.Changes{})
	out, err := runExplain(t, "10.96.0.10:53/udp", "--state-socket", sock, "--from-pod")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"service:    kube-system/kube-dns:dns port 53/UDP", "verdict:    DNAT",
		"endpoints:  10.244.1.2:53", "masquerade: false", "kernel objects (nftables mode):",
		"map service-ips element { 10.96.0.10 . udp . 53 : goto internal-1-s"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	out, err = runExplain(t, "10.96.0.10:53/UDP", "--state-socket", sock, "--source", "10.244.1.9", "--json")
	if err != nil {
		t.Fatal(err)
	}
	var r explain.Report
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatalf("--json: %v:\n%s", err, out)
	}
	if r.Verdict != "DNAT" || r.Service != "kube-system/kube-dns:dns" || r.Source != "pod" || r.Masquerade ||
		!slices.Equal(r.Endpoints, []string{"10.244.1.2:53"}) || r.Mode != "nftables" || len(r.Objects) == 0 || len(r.Reasons) == 0 {
		t.Errorf("--json: %+v", r)
	}
	if _, err := runExplain(t, "[fd00::10]:53/UDP", "--state-socket", sock); err == nil || !strings.Contains(err.Error(), "IPv6") {
		t.Errorf("IPv6 without state: err = %v", err)
	}
}

func TestExplainArguments(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"10.0.0.1:80/ICMP"}, "must be TCP, UDP or SCTP"},
		{[]string{"10.0.0.1"}, "want IP:PORT"},
		{[]string{"10.0.0.1:80", "--source", "nope"}, "--source"},
		{[]string{"10.0.0.1:80", "--from-pod", "--from-host"}, "none of the others"},
		{[]string{}, "accepts 1 arg"},
		{[]string{"10.0.0.1:80", "--state-socket", filepath.Join(t.TempDir(), "none.sock")}, "is it running"},
	} {
		if _, err := runExplain(t, tc.args...); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("explain %v: err = %v, want it to mention %q", tc.args, err, tc.want)
		}
	}
	p, err := explainOptions{source: "::ffff:10.0.0.9"}.packet("[::ffff:10.96.0.1]:443")
	if err != nil || p.Dest != netip.MustParseAddr("10.96.0.1") || p.Source != netip.MustParseAddr("10.0.0.9") || p.Protocol != proxy.TCP {
		t.Errorf("packet = %+v, %v", p, err)
	}
}

func TestVersionRaw(t *testing.T) {
	var b strings.Builder
	if err := printVersion(&b, "raw"); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`GitVersion:"` + Version + `"`, `GitCommit:"`, `GoVersion:"go1.`, `Platform:"linux/`} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("--version=raw lacks %s: %s", want, b.String())
		}
	}
}

// TestExplainInternalLocalAllLocal: internalTrafficPolicy Local with every
// endpoint on this node leaves Internal equal to Cluster, so nothing but the
// policy itself tells it apart. Explain must report it from the programmed
// State (through the debug wire form), not guess "Cluster" from the sets.
func TestExplainInternalLocalAllLocal(t *testing.T) {
	rec := debugstate.NewRecorder()
	sock := explainSocket(t, rec)
	name := proxy.ServicePortName{ServiceName: proxy.ServiceName{Namespace: "default", Name: "local"}, Protocol: proxy.TCP}
	ep := desired.Dispatch{Endpoints: []desired.Endpoint{{IP: netip.MustParseAddr("10.244.1.2"), Port: 80}}}
	rec.Record(&desired.State{
		Family: proxy.IPv4, NodePorts: desired.NodePortAddrs{All: true},
		Services: model.NewPortMap(map[proxy.ServicePortName]*desired.ServicePort{name: {Name: name, Protocol: proxy.TCP, Port: 80,
			ClusterIP: netip.MustParseAddr("10.96.0.11"), Internal: ep, External: ep, Cluster: ep, InternalLocal: true}}),
	}, model.Changes{})
	out, err := runExplain(t, "10.96.0.11:80", "--state-socket", sock, "--from-pod")
	if err != nil {
		t.Fatal(err)
	}
	if want := "policy:     internalTrafficPolicy: Local"; !strings.Contains(out, want) {
		t.Errorf("output lacks %q:\n%s", want, out)
	}
}
