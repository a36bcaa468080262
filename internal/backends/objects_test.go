package backends

import (
	"context"
	"crypto/sha256"
	"encoding/base32"
	"net/netip"
	"strings"
	"testing"

	"github.com/svcproxy/svcproxy/internal/explain"
	"github.com/svcproxy/svcproxy/internal/explain/explaintest"
	"github.com/svcproxy/svcproxy/pkg/pipeline/backends/iptables"
	"github.com/svcproxy/svcproxy/pkg/pipeline/desired"
	"github.com/svcproxy/svcproxy/pkg/pipeline/model"
	"github.com/svcproxy/svcproxy/pkg/proxy"
)

var a = netip.MustParseAddr

// TestNFTObjects checks the names come from the real renderer: the frontend
// element and the chains and maps it leads to.
func TestNFTObjects(t *testing.T) {
	st := explaintest.State()
	for _, tc := range []struct {
		pkt  explain.Packet
		want []string
	}{
		{explain.Packet{Dest: a("10.96.0.10"), Port: 80, Protocol: proxy.TCP, Origin: explain.OriginPod},
			[]string{"map service-ips element { 10.96.0.10 . tcp . 80 : goto internal-2-s", "chain internal-2", "set/map internal-endpoints"}},
		{explain.Packet{Dest: a("192.168.0.10"), Port: 30080, Protocol: proxy.TCP},
			[]string{"map service-nodeports element { tcp . 30080 : goto etp-local-nodeport-1-2-s", "set nodeport-ips",
				"chain cluster-nodeport-2", "set/map external-nodeport-endpoints", "set/map cluster-nodeport-endpoints"}},
		{explain.Packet{Dest: a("10.96.0.40"), Port: 80, Protocol: proxy.TCP, Origin: explain.OriginPod},
			[]string{"chain affinity-internal-", "set/map affinity-"}},
		{explain.Packet{Dest: a("10.96.0.30"), Port: 53, Protocol: proxy.UDP, Origin: explain.OriginPod},
			[]string{"map service-ips element { 10.96.0.30 . udp . 53 : goto reject-chain }", "chain reject-chain"}},
	} {
		e := explain.Explain(st, tc.pkt)
		objs, err := nftablesObjects(context.Background(), st, e)
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
	st := explaintest.State()
	e := explain.Explain(st, explain.Packet{Dest: a("10.96.0.10"), Port: 80, Protocol: proxy.TCP, Source: a("192.168.0.99")})
	objs, err := iptablesObjects(context.Background(), st, e)
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
	if got := iptables.ChainNamesOf(explaintest.PortName("ns1", "web", "http", proxy.TCP)).SVC; got != "KUBE-SVC-4LVCYZMTA5CQO6SX" {
		t.Errorf("SVC chain = %s, want the backend's KUBE-SVC-4LVCYZMTA5CQO6SX", got)
	}
}

// hash16 is upstream's chain hash, restated here (not imported) so that the
// tests check the backend's names against upstream's algorithm.
func hash16(s string) string {
	sum := sha256.Sum256([]byte(s))
	return base32.StdEncoding.EncodeToString(sum[:])[:16]
}

// TestIPVSObjectNames: the ipsets explain names are the IPVS backend's, for
// IPv6 (prefix KUBE-6-, truncated to the kernel's 31 characters as upstream)
// and for SCTP node ports (hash:ip,port sets named …-SCTP-HASH).
func TestIPVSObjectNames(t *testing.T) {
	v6 := explaintest.PortName("default", "v6", "", proxy.SCTP)
	ep := desired.Dispatch{Endpoints: explaintest.Endpoints("[fd00:10::5]:9000")}
	st := &desired.State{
		Family:    proxy.IPv6,
		NodePorts: desired.NodePortAddrs{IPs: []netip.Addr{a("fd00:1::2")}},
		Services: model.NewPortMap(map[proxy.ServicePortName]*desired.ServicePort{
			v6: {Name: v6, Protocol: proxy.SCTP, Port: 9000, ClusterIP: a("fd00:172:30::9"), NodePort: 30900,
				Internal: ep, External: ep, Cluster: ep, ExternalLocal: true},
		}),
	}
	sctp4 := cannedSCTP()
	for _, tc := range []struct {
		name  string
		state *desired.State
		pkt   explain.Packet
		want  []string
		never []string
	}{
		{"IPv6 cluster IP", st, explain.Packet{Dest: a("fd00:172:30::9"), Port: 9000, Protocol: proxy.SCTP},
			[]string{"KUBE-6-CLUSTER-IP"}, []string{"KUBE-CLUSTER-IP"}},
		{"IPv6 SCTP node port, eTP Local", st, explain.Packet{Dest: a("fd00:1::2"), Port: 30900, Protocol: proxy.SCTP},
			[]string{"KUBE-6-NODE-PORT-LOCAL-SCTP-HAS"}, []string{"KUBE-NODE-PORT-SCTP"}},
		{"IPv4 SCTP node port", sctp4, explain.Packet{Dest: a("192.168.0.10"), Port: 30901, Protocol: proxy.SCTP},
			[]string{"KUBE-NODE-PORT-SCTP-HASH"}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := explain.Explain(tc.state, tc.pkt)
			objs, err := ipvsObjects(context.Background(), tc.state, e)
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("%s", strings.Join(objs, "\n"))
			words := strings.FieldsFunc(strings.Join(objs, " "), func(r rune) bool { return r == ' ' || r == ',' || r == ';' })
			has := func(w string) bool {
				for _, x := range words {
					if x == w {
						return true
					}
				}
				return false
			}
			for _, w := range tc.want {
				if !has(w) {
					t.Errorf("objects lack %s:\n%s", w, strings.Join(objs, "\n"))
				}
			}
			for _, w := range tc.never {
				if has(w) {
					t.Errorf("objects name %s, which the backend does not use here:\n%s", w, strings.Join(objs, "\n"))
				}
			}
		})
	}
}

func cannedSCTP() *desired.State {
	st := explaintest.State()
	n := explaintest.PortName("default", "sctp", "", proxy.SCTP)
	ep := desired.Dispatch{Endpoints: explaintest.Endpoints("10.244.1.5:9000")}
	st.Services = model.NewPortMap(map[proxy.ServicePortName]*desired.ServicePort{n: {Name: n, Protocol: proxy.SCTP, Port: 9000,
		ClusterIP: a("10.96.0.90"), NodePort: 30901, Internal: ep, External: ep, Cluster: ep}})
	return st
}

// TestIPTablesInternalLocalChain: internalTrafficPolicy Local with every
// endpoint local is KUBE-SVL in the iptables backend, though Internal and
// Cluster hold the same endpoints.
func TestIPTablesInternalLocalChain(t *testing.T) {
	st := explaintest.State()
	n := explaintest.PortName("default", "local", "", proxy.TCP)
	ep := desired.Dispatch{Endpoints: explaintest.Endpoints("10.244.1.5:8080")}
	st.Services = st.Services.With(n, &desired.ServicePort{Name: n, Protocol: proxy.TCP, Port: 80, ClusterIP: a("10.96.0.50"),
		Internal: ep, External: ep, Cluster: ep, InternalLocal: true})
	e := explain.Explain(st, explain.Packet{Dest: a("10.96.0.50"), Port: 80, Protocol: proxy.TCP, Origin: explain.OriginPod})
	objs, err := iptablesObjects(context.Background(), st, e)
	if err != nil {
		t.Fatal(err)
	}
	if want := "nat KUBE-SVL-" + hash16("default/localtcp"); !strings.Contains(strings.Join(objs, "\n"), want) {
		t.Errorf("objects lack %s:\n%s", want, strings.Join(objs, "\n"))
	}
}

// TestIPVSSchedulerFromState: explain names the scheduler the daemon
// decided, and the ignored annotation, from the State (no check of its own).
func TestIPVSSchedulerFromState(t *testing.T) {
	st := explaintest.State()
	pkt := explain.Packet{Dest: a("10.96.0.10"), Port: 80, Protocol: proxy.TCP}
	for _, tc := range []struct {
		sched *desired.PortSetting
		want  string
	}{
		{&desired.PortSetting{Value: "lc"}, "scheduler lc"},
		{&desired.PortSetting{Value: "rr", Refused: "fastest"}, `scheduler rr (the annotation's "fastest" names no IPVS scheduler)`},
	} {
		web := *st.Service(explaintest.PortName("default", "web", "http", proxy.TCP))
		web.Setting = tc.sched
		st.Services = st.Services.With(web.Name, &web)
		objs, err := ipvsObjects(context.Background(), st, explain.Explain(st, pkt))
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(strings.Join(objs, "\n"), tc.want) {
			t.Errorf("objects lack %q:\n%s", tc.want, strings.Join(objs, "\n"))
		}
	}
}

// TestTCObjects: without nftables rules, explain names the tc programs'
// entry of a frontend they translate, and says that nothing on the node
// translates a cluster IP's packets from outside it.
func TestTCObjects(t *testing.T) {
	st := explaintest.State()
	for _, tc := range []struct {
		pkt  explain.Packet
		want string
	}{
		{explain.Packet{Dest: a("192.168.0.10"), Port: 30080, Protocol: proxy.TCP}, "map np_services entry 192.168.0.10:30080/tcp"},
		{explain.Packet{Dest: a("10.96.0.10"), Port: 80, Protocol: proxy.TCP}, "TCP cluster IP from outside the node not translated"},
	} {
		all := strings.Join(tcObjects(st, explain.Explain(st, tc.pkt)), "\n")
		if !strings.Contains(all, tc.want) {
			t.Errorf("%v: objects lack %q:\n%s", tc.pkt, tc.want, all)
		}
	}
}

// TestTCObjects6: an IPv6 frontend the tc programs translate is named by
// IPv6's own maps and programs, not IPv4's.
func TestTCObjects6(t *testing.T) {
	web := explaintest.PortName("default", "web6", "", proxy.TCP)
	eps := explaintest.Endpoints("[fd00:244::5]:8080")
	node := a("fd00::10")
	st := &desired.State{Family: proxy.IPv6, NodeIPs: []netip.Addr{node},
		NodePorts: desired.NodePortAddrs{IPs: []netip.Addr{node}},
		Services: model.NewPortMap(map[proxy.ServicePortName]*desired.ServicePort{
			web: {Name: web, Protocol: proxy.TCP, Port: 80, ClusterIP: a("fd00:96::10"), NodePort: 30080,
				Internal: desired.Dispatch{Endpoints: eps}, External: desired.Dispatch{Endpoints: eps}, Cluster: desired.Dispatch{Endpoints: eps}},
		})}
	all := strings.Join(tcObjects(st, explain.Explain(st, explain.Packet{Dest: node, Port: 30080, Protocol: proxy.TCP})), "\n")
	for _, want := range []string{"np_ingress6 / np_egress6", "map np_services6 entry [fd00::10]:30080/tcp", "map np_backends6 slots"} {
		if !strings.Contains(all, want) {
			t.Errorf("objects lack %q:\n%s", want, all)
		}
	}
}
