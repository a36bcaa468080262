package explain

import (
	"context"
	"crypto/sha256"
	"encoding/base32"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/svcproxy/svcproxy/pkg/proxy"
	"github.com/svcproxy/svcproxy/pkg/proxy/desired"
	"github.com/svcproxy/svcproxy/pkg/proxy/iptables"
	"github.com/svcproxy/svcproxy/pkg/proxy/model"
)

func spn(ns, name, port string, proto proxy.Protocol) proxy.ServicePortName {
	return proxy.ServicePortName{ServiceName: proxy.ServiceName{Namespace: ns, Name: name}, Port: port, Protocol: proto}
}

func eps(s ...string) []desired.Endpoint {
	var out []desired.Endpoint
	for _, a := range s {
		ap := netip.MustParseAddrPort(a)
		out = append(out, desired.Endpoint{IP: ap.Addr(), Port: ap.Port()})
	}
	return out
}

var (
	a  = netip.MustParseAddr
	ap = netip.MustParseAddrPort
)

// cannedState: web (eTP Local, LB with source ranges, node port, one local
// and one remote endpoint), api (iTP Local, no local endpoint), empty (no
// endpoints at all), sticky (ClientIP affinity).
func cannedState() *desired.State {
	web := spn("default", "web", "http", proxy.TCP)
	api := spn("default", "api", "", proxy.TCP)
	empty := spn("default", "empty", "", proxy.UDP)
	sticky := spn("default", "sticky", "", proxy.TCP)
	all := eps("10.244.1.5:8080", "10.244.2.7:8080")
	return &desired.State{
		Family:    proxy.IPv4,
		NodeIPs:   []netip.Addr{a("192.168.0.10")},
		NodePorts: desired.NodePortAddrs{IPs: []netip.Addr{a("192.168.0.10")}},
		Masquerade: desired.Masquerade{Mark: 0x4000, Local: desired.LocalDetector{
			Mode: desired.LocalCIDR, CIDRs: []netip.Prefix{netip.MustParsePrefix("10.244.0.0/16")}}},
		Services: model.NewPortMap(map[proxy.ServicePortName]*desired.ServicePort{
			web: {Name: web, Protocol: proxy.TCP, Port: 80, ClusterIP: a("10.96.0.10"), NodePort: 30080,
				ExternalIPs: []netip.Addr{a("198.51.100.1")}, LoadBalancerIPs: []netip.Addr{a("203.0.113.5")},
				AllowedSources: []netip.Prefix{netip.MustParsePrefix("203.0.113.0/24"), netip.MustParsePrefix("198.18.0.0/15")},
				Internal:       desired.Dispatch{Endpoints: all}, Cluster: desired.Dispatch{Endpoints: all},
				External:      desired.Dispatch{Endpoints: eps("10.244.1.5:8080")},
				ExternalLocal: true, HealthCheckNodePort: 31000},
			api: {Name: api, Protocol: proxy.TCP, Port: 443, ClusterIP: a("10.96.0.20"),
				Internal: desired.Dispatch{Empty: desired.Drop}, Cluster: desired.Dispatch{Endpoints: eps("10.244.2.9:6443")},
				External: desired.Dispatch{Endpoints: eps("10.244.2.9:6443")}, InternalLocal: true},
			empty: {Name: empty, Protocol: proxy.UDP, Port: 53, ClusterIP: a("10.96.0.30"), NodePort: 30053,
				Internal: desired.Dispatch{Empty: desired.Reject}, External: desired.Dispatch{Empty: desired.Reject},
				Cluster: desired.Dispatch{Empty: desired.Reject}},
			sticky: {Name: sticky, Protocol: proxy.TCP, Port: 80, ClusterIP: a("10.96.0.40"), AffinitySeconds: 10800,
				Internal: desired.Dispatch{Endpoints: all}, External: desired.Dispatch{Endpoints: all}, Cluster: desired.Dispatch{Endpoints: all}},
		}),
	}
}

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
	web := spn("default", "web", "http", proxy.TCP)
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

// TestNFTObjects checks the names come from the real renderer: the frontend
// element and the chains and maps it leads to.
func TestNFTObjects(t *testing.T) {
	st := cannedState()
	for _, tc := range []struct {
		pkt  Packet
		want []string
	}{
		{Packet{Dest: a("10.96.0.10"), Port: 80, Protocol: proxy.TCP, Origin: OriginPod},
			[]string{"map service-ips element { 10.96.0.10 . tcp . 80 : goto internal-2-s", "chain internal-2", "set/map internal-endpoints"}},
		{Packet{Dest: a("192.168.0.10"), Port: 30080, Protocol: proxy.TCP},
			[]string{"map service-nodeports element { tcp . 30080 : goto etp-local-nodeport-1-2-s", "set nodeport-ips",
				"chain cluster-nodeport-2", "set/map external-nodeport-endpoints", "set/map cluster-nodeport-endpoints"}},
		{Packet{Dest: a("10.96.0.40"), Port: 80, Protocol: proxy.TCP, Origin: OriginPod},
			[]string{"chain affinity-internal-", "set/map affinity-"}},
		{Packet{Dest: a("10.96.0.30"), Port: 53, Protocol: proxy.UDP, Origin: OriginPod},
			[]string{"map service-ips element { 10.96.0.30 . udp . 53 : goto reject-chain }", "chain reject-chain"}},
	} {
		e := Explain(st, tc.pkt)
		objs, err := NFTablesObjects(context.Background(), st, e)
		if err != nil {
			t.Fatalf("%v: %v", tc.pkt, err)
		}
		all := strings.Join(objs, "\n")
		for _, w := range tc.want {
			if !strings.Contains(all, w) {
				t.Errorf("%v: objects lack %q:\n%s", tc.pkt, w, all)
			}
		}
	}
}

func TestIPTablesObjects(t *testing.T) {
	st := cannedState()
	e := Explain(st, Packet{Dest: a("10.96.0.10"), Port: 80, Protocol: proxy.TCP, Source: a("192.168.0.99")})
	objs, err := IPTablesObjects(context.Background(), st, e)
	if err != nil {
		t.Fatal(err)
	}
	// Upstream's hash of "default/web:http"+"tcp" and of the endpoint.
	want := []string{"nat KUBE-SVC-" + hash16("default/web:httptcp"), "nat KUBE-SEP-" + hash16("default/web:httptcp10.244.1.5:8080"), "KUBE-MARK-MASQ"}
	all := strings.Join(objs, "\n")
	for _, w := range want {
		if !strings.Contains(all, w) {
			t.Errorf("objects lack %q:\n%s", w, all)
		}
	}
	// A name from the iptables backend's golden dump, itself checked
	// against upstream's.
	if got := iptables.ChainNamesOf(spn("ns1", "web", "http", proxy.TCP)).SVC; got != "KUBE-SVC-4LVCYZMTA5CQO6SX" {
		t.Errorf("SVC chain = %s, want the backend's KUBE-SVC-4LVCYZMTA5CQO6SX", got)
	}
}

// hash16 is upstream's chain hash, restated here (not imported) so that the
// tests check the backend's names against upstream's algorithm.
func hash16(s string) string {
	sum := sha256.Sum256([]byte(s))
	return base32.StdEncoding.EncodeToString(sum[:])[:16]
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
