package explain

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/svcproxy/svcproxy/pkg/proxy"
)

func TestWriteJSON(t *testing.T) {
	st := cannedState()
	for _, tc := range []struct {
		name string
		pkt  Packet
		want Report
	}{
		{"eTP Local node port from outside", Packet{Dest: a("192.168.0.10"), Port: 30080, Protocol: proxy.TCP, Source: a("198.18.0.100")},
			Report{Packet: PacketReport{Dest: "192.168.0.10", Port: 30080, Protocol: "TCP", Source: "198.18.0.100"},
				Family: "IPv4", Verdict: "DNAT", Service: "default/web:http", ServicePort: 80, ClusterIP: "10.96.0.10",
				Frontend: FrontendNodePort, Source: "external", Class: ClassExternal, Policy: "externalTrafficPolicy: Local",
				Endpoints: []string{"10.244.1.5:8080"}, Balancing: "random", Forwarding: "snat", Mode: "nftables", Objects: []string{"obj"}}},
		{"no endpoints", Packet{Dest: a("10.96.0.30"), Port: 53, Protocol: proxy.UDP, Origin: OriginPod},
			Report{Packet: PacketReport{Dest: "10.96.0.30", Port: 53, Protocol: "UDP"},
				Family: "IPv4", Verdict: "REJECT", Service: "default/empty", ServicePort: 53, ClusterIP: "10.96.0.30",
				Frontend: FrontendClusterIP, Source: "pod", Class: ClassInternal, Policy: "internalTrafficPolicy: Cluster",
				Mode: "nftables", Objects: []string{"obj"}}},
		{"not a service", Packet{Dest: a("10.1.2.3"), Port: 80, Protocol: proxy.TCP},
			Report{Packet: PacketReport{Dest: "10.1.2.3", Port: 80, Protocol: "TCP"},
				Family: "IPv4", Verdict: "ACCEPT", Source: "external", Mode: "nftables", Objects: []string{"obj"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := Explain(st, tc.pkt)
			var b strings.Builder
			if err := e.WriteJSON(&b, "nftables", []string{"obj"}); err != nil {
				t.Fatal(err)
			}
			var got Report
			if err := json.Unmarshal([]byte(b.String()), &got); err != nil {
				t.Fatalf("%v:\n%s", err, b.String())
			}
			if !slices.Equal(got.Reasons, e.Reasons) || len(got.Reasons) == 0 {
				t.Errorf("reasons %q, want %q", got.Reasons, e.Reasons)
			}
			got.Reasons = nil
			gj, _ := json.Marshal(got)
			wj, _ := json.Marshal(tc.want)
			if string(gj) != string(wj) {
				t.Errorf("report\n got %s\nwant %s", gj, wj)
			}
		})
	}
	for v, w := range map[Verdict]string{Accept: "ACCEPT", DNAT: "DNAT", Reject: "REJECT", Drop: "DROP"} {
		if v.Word() != w {
			t.Errorf("%q.Word() = %q", v, v.Word())
		}
	}
}
