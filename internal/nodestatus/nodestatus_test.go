package nodestatus

import (
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/svcproxy/svcproxy/internal/debugstate"
	"github.com/svcproxy/svcproxy/pkg/pipeline/desired"
	"github.com/svcproxy/svcproxy/pkg/pipeline/syncer"
	"github.com/svcproxy/svcproxy/pkg/proxy"
)

var now = time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC)

func spName(name, port string) proxy.ServicePortName {
	return proxy.ServicePortName{ServiceName: proxy.ServiceName{Namespace: "shop", Name: name}, Port: port, Protocol: proxy.TCP}
}

func port(name string, ip string, lb ...string) *desired.ServicePort {
	sp := &desired.ServicePort{Name: spName(name, "http"), Protocol: proxy.TCP, Port: 80, NodePort: 30080,
		ClusterIP: netip.MustParseAddr(ip)}
	sp.Internal.Endpoints = []proxy.Endpoint{{IP: netip.MustParseAddr("10.244.1.5"), Port: 8080}}
	for _, a := range lb {
		sp.LoadBalancerIPs = append(sp.LoadBalancerIPs, netip.MustParseAddr(a))
	}
	return sp
}

// A quarantined port is told with what the kernel serves for it: nothing,
// its previous version, or that version without its LB IPs.
func TestFromReportTellsWhatTheKernelServes(t *testing.T) {
	rejected := port("cart", "10.96.0.20", "192.0.2.1")
	withoutLB := *rejected
	withoutLB.LoadBalancerIPs = nil
	r := &syncer.Report{Family: proxy.IPv4, LastSuccess: now, LastAttempt: now, LastDuration: 3 * time.Millisecond,
		LastMode: "partial", ServicePorts: 2, Quarantined: []syncer.QuarantinedPort{
			{Name: spName("a", "http"), Rejected: rejected, Error: "e", Since: now},
			{Name: spName("b", "http"), Rejected: rejected, Held: port("cart", "10.96.0.20", "192.0.2.1"), Error: "e", Since: now},
			{Name: spName("c", "http"), Rejected: rejected, Held: &withoutLB, Error: "e", Since: now},
			{Name: spName("d", "http"), Error: "kept by the previous process", Since: now},
		}}
	f := FromReport(r, true, nil)
	want := []string{KernelServesNothing, KernelServesPrevious, KernelServesPreviousWithoutLB, KernelServesNothing}
	for i, q := range f.Quarantined {
		if q.Kernel != want[i] {
			t.Errorf("%s: kernel serves %q, want %q", q.ServicePortName(), q.Kernel, want[i])
		}
	}
	if f.Quarantined[3].Rejected != nil || f.Quarantined[0].Rejected == nil || f.Quarantined[0].Rejected.ClusterIP != rejected.ClusterIP {
		t.Errorf("rejected versions: %+v", f.Quarantined)
	}
	if f.LastSync == nil || f.LastSyncMode != "partial" || f.LastDuration != "3ms" || f.ServicePorts != 2 {
		t.Errorf("family %+v", f)
	}
}

// services lists programmed and quarantined ports together, one row per
// port and family: a quarantined port the kernel serves nothing for is
// shown at its rejected version, without endpoints.
func TestRowsAndTable(t *testing.T) {
	web := debugstate.EncodePort(port("web", "10.96.0.10"))
	held := debugstate.EncodePort(port("cart", "10.96.0.20"))
	bad := debugstate.EncodePort(port("bad", "10.96.0.30"))
	states := []debugstate.State{{Family: proxy.IPv4, Services: []debugstate.ServicePort{held, web}}}
	status := Status{Families: []Family{{Family: proxy.IPv4, Quarantined: []Quarantined{
		{Namespace: "shop", Name: "cart", PortName: "http", Protocol: proxy.TCP, Kernel: KernelServesPrevious,
			Error: "netlink: invalid argument", Since: now.Add(-5 * time.Minute), Rejected: &held},
		{Namespace: "shop", Name: "bad", PortName: "http", Protocol: proxy.TCP, Kernel: KernelServesNothing,
			Error: "netlink: file exists", Since: now.Add(-90 * time.Second), Rejected: &bad},
	}}}}
	rows := Rows(states, status, false)
	var names []string
	for _, r := range rows {
		names = append(names, rowName(r).Name+"="+r.Status)
	}
	if got := strings.Join(names, " "); got != "bad=quarantined cart=quarantined web=programmed" {
		t.Fatalf("rows %s", got)
	}
	if q := Rows(states, status, true); len(q) != 2 {
		t.Errorf("--quarantined: %d rows, want 2", len(q))
	}
	var b strings.Builder
	if err := WriteServices(&b, rows, false, now); err != nil {
		t.Fatal(err)
	}
	expectNarrowText(t, b.String(),
		"shop/bad:http   10.96.0.30  80:30080/TCP  -          quarantined\n",
		"shop/cart:http  10.96.0.20  80:30080/TCP  1          quarantined\n",
		"shop/web:http   10.96.0.10  80:30080/TCP  1          programmed")
	b.Reset()
	if err := WriteServices(&b, rows, true, now); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), "-                1m ago       netlink: file exists (kernel serves nothing)") ||
		!strings.Contains(b.String(), "10.244.1.5:8080") {
		t.Errorf("wide table lacks the kernel's error or the endpoints:\n%s", b.String())
	}
}

func TestWriteStatus(t *testing.T) {
	last := now.Add(-3 * time.Second)
	s := Status{Version: "v0.3.0", Mode: "iptables", Node: "node-1", Started: now.Add(-2 * time.Hour),
		IPTablesFlavour: "nft", Healthy: false, Families: []Family{
			{Family: proxy.IPv4, Healthy: true, LastSync: &last, LastSyncMode: "partial", LastAttempt: &last,
				LastDuration: "4ms", ServicePorts: 120, Endpoints: 340, Quarantined: []Quarantined{
					{Namespace: "shop", Name: "bad", Protocol: proxy.TCP, Kernel: KernelServesNothing,
						Error: "netlink: file exists", Since: now.Add(-time.Minute)}}},
			{Family: proxy.IPv6, LastAttempt: &last, LastDuration: "1ms", LastError: "iptables-restore: exit status 4"},
		}}
	var b strings.Builder
	if err := WriteStatus(&b, s, now); err != nil {
		t.Fatal(err)
	}
	expectNarrowText(t, b.String(),
		"svcproxy v0.3.0 on node node-1, mode iptables (iptables nft)",
		"started 2h ago, UNHEALTHY",
		"IPv4    healthy    3s ago     partial  4ms   120    340        1",
		"IPv6    UNHEALTHY  never      -        1ms   0      0          0",
		"IPv6: the last sync failed 3s ago:\n  iptables-restore: exit status 4",
		"shop/bad TCP (IPv4), since 1m ago; the kernel serves nothing\n    netlink: file exists")
}

// expectNarrowText checks that text holds every want and fits 80 columns.
func expectNarrowText(t *testing.T, text string, wants ...string) {
	t.Helper()
	for _, want := range wants {
		if !strings.Contains(text, want) {
			t.Errorf("output lacks %q:\n%s", want, text)
		}
	}
	for line := range strings.Lines(text) {
		if len(strings.TrimRight(line, "\n")) > 80 {
			t.Errorf("line wider than 80 columns: %q", line)
		}
	}
}
