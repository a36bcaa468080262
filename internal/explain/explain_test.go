package explain

import (
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/svcproxy/svcproxy/internal/explain/explaintest"
	"github.com/svcproxy/svcproxy/pkg/pipeline/desired"
	"github.com/svcproxy/svcproxy/pkg/pipeline/model"
	"github.com/svcproxy/svcproxy/pkg/proxy"
)

// The shared fixture, under the name these tests have always used.
var (
	cannedState = explaintest.State
	a           = netip.MustParseAddr
	ap          = netip.MustParseAddrPort
)

func TestExplain(t *testing.T) {
	st := cannedState()
	web := ap("10.244.1.5:8080")
	both := []netip.AddrPort{web, ap("10.244.2.7:8080")}
	for _, tc := range []struct {
		name      string
		pkt       Packet
		verdict   Verdict
		frontend  string
		class     string
		endpoints []netip.AddrPort
		masq      bool
		reason    string
	}{
		{"cluster IP from pod", Packet{Dest: a("10.96.0.10"), Port: 80, Protocol: proxy.TCP, Source: a("10.244.3.3")},
			DNAT, FrontendClusterIP, ClassInternal, both, false, "inside the pod CIDRs"},
		{"cluster IP from outside", Packet{Dest: a("10.96.0.10"), Port: 80, Protocol: proxy.TCP, Source: a("192.168.0.99")},
			DNAT, FrontendClusterIP, ClassInternal, both, true, "not from a pod is masqueraded"},
		{"cluster IP hairpin", Packet{Dest: a("10.96.0.10"), Port: 80, Protocol: proxy.TCP, Source: a("10.244.1.5")},
			DNAT, FrontendClusterIP, ClassInternal, both, true, "hairpin"},
		{"unknown port on cluster IP", Packet{Dest: a("10.96.0.10"), Port: 81, Protocol: proxy.TCP},
			Reject, FrontendClusterIP, "", nil, false, "no Service port 81/TCP"},
		{"iTP Local without local endpoint", Packet{Dest: a("10.96.0.20"), Port: 443, Protocol: proxy.TCP, Origin: OriginPod},
			Drop, FrontendClusterIP, ClassInternal, nil, false, "internalTrafficPolicy is Local"},
		{"no endpoints", Packet{Dest: a("10.96.0.30"), Port: 53, Protocol: proxy.UDP, Origin: OriginPod},
			Reject, FrontendClusterIP, ClassInternal, nil, false, "no usable endpoint"},
		{"LB from allowed client, eTP Local", Packet{Dest: a("203.0.113.5"), Port: 80, Protocol: proxy.TCP, Source: a("203.0.113.77")},
			DNAT, FrontendLoadBalancer, ClassExternal, []netip.AddrPort{web}, false, "client source IP is kept"},
		{"LB from a disallowed client", Packet{Dest: a("203.0.113.5"), Port: 80, Protocol: proxy.TCP, Source: a("8.8.8.8")},
			Drop, FrontendLoadBalancer, "", nil, false, "outside loadBalancerSourceRanges"},
		{"external IP from pod short-circuits", Packet{Dest: a("198.51.100.1"), Port: 80, Protocol: proxy.TCP, Source: a("10.244.9.9")},
			DNAT, FrontendExternalIP, ClassCluster, both, false, "short-circuited"},
		{"node port from host", Packet{Dest: a("192.168.0.10"), Port: 30080, Protocol: proxy.TCP, Origin: OriginHost},
			DNAT, FrontendNodePort, ClassCluster, both, true, "from the node itself"},
		{"node port on a non-nodePortAddress", Packet{Dest: a("192.168.0.11"), Port: 30080, Protocol: proxy.TCP},
			Accept, "", "", nil, false, "not among the nodePortAddresses"},
		{"node port without endpoints, eTP Cluster", Packet{Dest: a("192.168.0.10"), Port: 30053, Protocol: proxy.UDP},
			Reject, FrontendNodePort, ClassExternal, nil, false, "externalTrafficPolicy is Cluster"},
		{"not a service", Packet{Dest: a("10.1.2.3"), Port: 80, Protocol: proxy.TCP},
			Accept, "", "", nil, false, "no cluster IP"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := Explain(st, tc.pkt)
			if e.Verdict != tc.verdict || e.Frontend != tc.frontend || e.Class != tc.class ||
				!slices.Equal(e.Endpoints, tc.endpoints) || e.Masquerade != tc.masq {
				t.Errorf("got verdict %s frontend %q class %q endpoints %v masq %t; want %s %q %q %v %t",
					e.Verdict, e.Frontend, e.Class, e.Endpoints, e.Masquerade, tc.verdict, tc.frontend, tc.class, tc.endpoints, tc.masq)
			}
			if !strings.Contains(strings.Join(e.Reasons, "\n"), tc.reason) {
				t.Errorf("reasons lack %q:\n%s", tc.reason, strings.Join(e.Reasons, "\n"))
			}
		})
	}
}

func TestAffinityAndWrite(t *testing.T) {
	e := Explain(cannedState(), Packet{Dest: a("10.96.0.40"), Port: 80, Protocol: proxy.TCP, Origin: OriginPod})
	if e.Affinity != 10800 {
		t.Errorf("affinity = %d", e.Affinity)
	}
	var b strings.Builder
	if err := e.Write(&b, "nftables", []string{"obj"}); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"service:    default/sticky", "verdict:    DNAT", "affinity:   ClientIP, 10800 s", "kernel objects (nftables mode):\n  obj"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, b.String())
		}
	}
}

// TestBalancingShown: a packet DNATed through an external frontend shows
// the port's balancing, and maglev says that nothing routes by it yet;
// cluster-IP traffic, which the decision is not about, shows none.
func TestBalancingShown(t *testing.T) {
	st := cannedState()
	web := explaintest.PortName("default", "web", "http", proxy.TCP)
	sp := *st.Service(web)
	sp.ExternalBalancing = proxy.BalanceMaglev
	var services model.PortMapEditor[*desired.ServicePort]
	for name, p := range st.Services.All() {
		services.Set(name, p)
	}
	services.Set(web, &sp)
	st.Services = services.Done()

	e := Explain(st, Packet{Dest: a("203.0.113.5"), Port: 80, Protocol: proxy.TCP, Source: a("198.18.0.100")})
	var b strings.Builder
	if err := e.Write(&b, "nftables", nil); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"balancing:  maglev (external traffic)", "no datapath routes by it yet"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("LB IP packet: output lacks %q:\n%s", want, b.String())
		}
	}
	if e := Explain(st, Packet{Dest: a("10.96.0.10"), Port: 80, Protocol: proxy.TCP, Origin: OriginPod}); e.Balancing != "" {
		t.Errorf("cluster IP packet: balancing %q, want none", e.Balancing)
	}
}

// TestExplainLocalhostNodePorts: a node port on 127.0.0.1 is explained
// from the daemon's own localhost decision (State.NodePorts.Localhost),
// never guessed from the mode.
func TestExplainLocalhostNodePorts(t *testing.T) {
	lo := a("127.0.0.1")
	tcp := Packet{Dest: lo, Port: 30080, Protocol: proxy.TCP, Origin: OriginHost}
	udp := Packet{Dest: lo, Port: 30053, Protocol: proxy.UDP, Origin: OriginHost}
	for _, tc := range []struct {
		localhost desired.LocalhostNodePorts
		pkt       Packet
		verdict   Verdict
		reason    string
	}{
		{desired.LocalhostOff, tcp, Accept, "do not answer on loopback"},
		{desired.LocalhostReject, tcp, Reject, "rejected and counted"},
		{desired.LocalhostProxied, tcp, Accept, "userspace localhost proxy answers it"},
		{desired.LocalhostProxied, udp, Reject, "serves TCP only"},
		{desired.LocalhostDNAT, tcp, DNAT, "DNATed like any node port"},
	} {
		t.Run(tc.localhost.String()+"/"+string(tc.pkt.Protocol), func(t *testing.T) {
			st := cannedState()
			st.NodePorts = desired.NodePortAddrs{All: true, Localhost: tc.localhost}
			e := Explain(st, tc.pkt)
			if e.Verdict != tc.verdict {
				t.Errorf("verdict %s, want %s", e.Verdict, tc.verdict)
			}
			if !strings.Contains(strings.Join(e.Reasons, "\n"), tc.reason) {
				t.Errorf("reasons lack %q:\n%s", tc.reason, strings.Join(e.Reasons, "\n"))
			}
		})
	}
}

// TestServiceRangeDrop: with the ServiceCIDR ranges in the State (nftables
// mode), a new connection to an address of the range that no Service holds
// is dropped by cluster-ips-check; explain said ACCEPT.
func TestServiceRangeDrop(t *testing.T) {
	st := cannedState()
	st.ServiceCIDRs = []netip.Prefix{netip.MustParsePrefix("10.96.0.0/16")}
	e := Explain(st, Packet{Dest: a("10.96.7.7"), Port: 80, Protocol: proxy.TCP, Origin: OriginPod})
	if e.Verdict != Drop || !strings.Contains(strings.Join(e.Reasons, "\n"), "10.96.0.0/16") {
		t.Errorf("unheld address in the service range: verdict %s, reasons %q; want DROP naming the range", e.Verdict, e.Reasons)
	}
	if e := Explain(st, Packet{Dest: a("10.1.2.3"), Port: 80, Protocol: proxy.TCP}); e.Verdict != Accept {
		t.Errorf("outside the service range: %s, want ACCEPT", e.Verdict)
	}
}
