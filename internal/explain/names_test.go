package explain

import (
	"context"
	"net/netip"
	"strings"
	"testing"

	"github.com/svcproxy/svcproxy/pkg/proxy"
	"github.com/svcproxy/svcproxy/pkg/proxy/desired"
	"github.com/svcproxy/svcproxy/pkg/proxy/model"
)

// TestIPVSObjectNames: the ipsets explain names are the IPVS backend's, for
// IPv6 (prefix KUBE-6-, truncated to the kernel's 31 characters as upstream)
// and for SCTP node ports (hash:ip,port sets named …-SCTP-HASH).
func TestIPVSObjectNames(t *testing.T) {
	v6 := spn("default", "v6", "", proxy.SCTP)
	ep := desired.Dispatch{Endpoints: eps("[fd00:10::5]:9000")}
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
		pkt   Packet
		want  []string
		never []string
	}{
		{"IPv6 cluster IP", st, Packet{Dest: a("fd00:172:30::9"), Port: 9000, Protocol: proxy.SCTP},
			[]string{"KUBE-6-CLUSTER-IP"}, []string{"KUBE-CLUSTER-IP"}},
		{"IPv6 SCTP node port, eTP Local", st, Packet{Dest: a("fd00:1::2"), Port: 30900, Protocol: proxy.SCTP},
			[]string{"KUBE-6-NODE-PORT-LOCAL-SCTP-HAS"}, []string{"KUBE-NODE-PORT-SCTP"}},
		{"IPv4 SCTP node port", sctp4, Packet{Dest: a("192.168.0.10"), Port: 30901, Protocol: proxy.SCTP},
			[]string{"KUBE-NODE-PORT-SCTP-HASH"}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := Explain(tc.state, tc.pkt)
			objs, err := IPVSObjects(context.Background(), tc.state, e)
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
	st := cannedState()
	n := spn("default", "sctp", "", proxy.SCTP)
	ep := desired.Dispatch{Endpoints: eps("10.244.1.5:9000")}
	st.Services = model.NewPortMap(map[proxy.ServicePortName]*desired.ServicePort{n: {Name: n, Protocol: proxy.SCTP, Port: 9000,
		ClusterIP: a("10.96.0.90"), NodePort: 30901, Internal: ep, External: ep, Cluster: ep}})
	return st
}

// TestIPTablesInternalLocalChain: internalTrafficPolicy Local with every
// endpoint local is KUBE-SVL in the iptables backend, though Internal and
// Cluster hold the same endpoints.
func TestIPTablesInternalLocalChain(t *testing.T) {
	st := cannedState()
	n := spn("default", "local", "", proxy.TCP)
	ep := desired.Dispatch{Endpoints: eps("10.244.1.5:8080")}
	st.Services = st.Services.With(n, &desired.ServicePort{Name: n, Protocol: proxy.TCP, Port: 80, ClusterIP: a("10.96.0.50"),
		Internal: ep, External: ep, Cluster: ep, InternalLocal: true})
	e := Explain(st, Packet{Dest: a("10.96.0.50"), Port: 80, Protocol: proxy.TCP, Origin: OriginPod})
	objs, err := IPTablesObjects(context.Background(), st, e)
	if err != nil {
		t.Fatal(err)
	}
	if want := "nat KUBE-SVL-" + hash16("default/localtcp"); !strings.Contains(strings.Join(objs, "\n"), want) {
		t.Errorf("objects lack %s:\n%s", want, strings.Join(objs, "\n"))
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

// TestIPVSSchedulerFromState: explain names the scheduler the daemon
// decided, and the ignored annotation, from the State (no check of its own).
func TestIPVSSchedulerFromState(t *testing.T) {
	st := cannedState()
	pkt := Packet{Dest: a("10.96.0.10"), Port: 80, Protocol: proxy.TCP}
	for _, tc := range []struct {
		sched *desired.Scheduler
		want  string
	}{
		{&desired.Scheduler{Name: "lc"}, "scheduler lc"},
		{&desired.Scheduler{Name: "rr", Ignored: "fastest"}, `scheduler rr (the annotation's "fastest" names no IPVS scheduler)`},
	} {
		web := *st.Service(spn("default", "web", "http", proxy.TCP))
		web.Scheduler = tc.sched
		st.Services = st.Services.With(web.Name, &web)
		objs, err := IPVSObjects(context.Background(), st, Explain(st, pkt))
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(strings.Join(objs, "\n"), tc.want) {
			t.Errorf("objects lack %q:\n%s", tc.want, strings.Join(objs, "\n"))
		}
	}
}
