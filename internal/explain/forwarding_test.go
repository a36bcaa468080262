package explain

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/svcproxy/svcproxy/pkg/pipeline/desired"
	"github.com/svcproxy/svcproxy/pkg/proxy"
	"github.com/svcproxy/svcproxy/pkg/testing/proxytest"
)

// dsrCase returns the State of proxytest's DSR case named name, IPv4.
func dsrCase(t *testing.T, name string) *desired.State {
	t.Helper()
	for _, c := range proxytest.DSRCases() {
		if c.Name == name {
			return proxytest.BuildState(t, c, proxy.IPv4)
		}
	}
	t.Fatalf("no DSR case %q", name)
	return nil
}

// A DSR port's external route names each tunnelled endpoint's node and
// address, in the text and the JSON report; the others are masqueraded.
func TestExplainDSRTunnels(t *testing.T) {
	st := dsrCase(t, "DSR: endpoints on a peer are tunnelled, the others masqueraded")
	w := proxytest.WorldOf(proxy.IPv4)
	e := Explain(st, Packet{Dest: w.LoadBalancerIP(30), Port: 80, Protocol: proxy.TCP, Source: w.ExternalClient})
	var b strings.Builder
	if err := e.Write(&b, "ebpf", nil); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"forwarding: dsr", "tunnel:     10.0.2.1:8080 via node node-b (192.168.0.3), client kept",
		"tunnel:     10.0.2.2:8080 via node node-b (192.168.0.3), client kept",
		"10.0.2.1:8080: tunnelled to node node-b (192.168.0.3), client kept", "the other endpoints are not on a peer"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, b.String())
		}
	}
	var report strings.Builder
	if err := e.WriteJSON(&report, "ebpf", nil); err != nil {
		t.Fatal(err)
	}
	var r Report
	if err := json.Unmarshal([]byte(report.String()), &r); err != nil {
		t.Fatal(err)
	}
	if r.Forwarding != "dsr" || len(r.Tunneled) != 2 || r.Tunneled[0] != (TunnelReport{Endpoint: "10.0.2.1:8080", Node: "node-b", NodeIP: "192.168.0.3"}) {
		t.Errorf("JSON forwarding %q, tunneled %+v", r.Forwarding, r.Tunneled)
	}

	pod := Explain(st, Packet{Dest: w.LoadBalancerIP(30), Port: 80, Protocol: proxy.TCP, Source: w.LocalPod(9)})
	if len(pod.Tunneled) != 0 || !strings.Contains(strings.Join(pod.Reasons, "\n"), "from outside the node only") {
		t.Errorf("a pod's packet: tunneled %+v, reasons %q", pod.Tunneled, pod.Reasons)
	}
	peer := Explain(st, Packet{Dest: w.NodeIP, Port: 30080, Protocol: proxy.TCP, Source: w.OtherNodeIP})
	if len(peer.Tunneled) != 0 || !strings.Contains(strings.Join(peer.Reasons, "\n"), "the source 192.168.0.3 is inside the cluster") {
		t.Errorf("another node's packet: tunneled %+v, reasons %q", peer.Tunneled, peer.Reasons)
	}
}

// A port that asks for dsr where it does not apply shows the forwarding
// and why it does not apply.
func TestExplainDSRNotApplied(t *testing.T) {
	w := proxytest.WorldOf(proxy.IPv4)
	for _, tc := range []struct {
		state *desired.State
		pkt   Packet
		why   string
	}{
		{dsrCase(t, "DSR: not on a node without --bpf-dsr"), Packet{Dest: w.LoadBalancerIP(37), Port: 80, Protocol: proxy.TCP},
			"only ebpf mode with --bpf-dsr does"},
		{dsrCase(t, "DSR: not for externalTrafficPolicy Local, SCTP, or snat"), Packet{Dest: w.LoadBalancerIP(34), Port: 80, Protocol: proxy.TCP},
			"externalTrafficPolicy is Local"},
		{dsrCase(t, "DSR: not for externalTrafficPolicy Local, SCTP, or snat"), Packet{Dest: w.NodeIP, Port: 30082, Protocol: proxy.SCTP},
			"protocol SCTP is never tunnelled"},
	} {
		e := Explain(tc.state, tc.pkt)
		if reasons := strings.Join(e.Reasons, "\n"); e.Forwarding != "dsr" || len(e.Tunneled) != 0 || !strings.Contains(reasons, tc.why) ||
			!strings.Contains(reasons, "does not apply") {
			t.Errorf("%s:%d/%s: forwarding %q, tunneled %+v, reasons %q; want dsr, none, %q", tc.pkt.Dest, tc.pkt.Port, tc.pkt.Protocol,
				e.Forwarding, e.Tunneled, e.Reasons, tc.why)
		}
	}
}

// A node port on an address that is not a node IP is not tunnelled, and
// explain says why.
func TestExplainDSRNodePortOffNodeIP(t *testing.T) {
	st := dsrCase(t, "DSR: endpoints on a peer are tunnelled, the others masqueraded")
	w := proxytest.WorldOf(proxy.IPv4)
	e := Explain(st, Packet{Dest: w.SecondHostIP, Port: 30080, Protocol: proxy.TCP, Source: w.ExternalClient})
	if len(e.Tunneled) != 0 || !e.Masquerade || !strings.Contains(strings.Join(e.Reasons, "\n"), "tunnelled only on the node IPs") {
		t.Errorf("tunneled %+v, masquerade %t, reasons %q", e.Tunneled, e.Masquerade, e.Reasons)
	}
}
