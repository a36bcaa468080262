package hostile

import (
	"context"
	"fmt"
	"net/netip"
	"strings"
	"testing"

	"sigs.k8s.io/knftables"

	"github.com/svcproxy/svcproxy/pkg/kiptables"
	"github.com/svcproxy/svcproxy/pkg/pipeline/desired"
	"github.com/svcproxy/svcproxy/pkg/pipeline/model"
	"github.com/svcproxy/svcproxy/pkg/proxy"
)

// recorder collects what a check reports.
type recorder struct{ errs []string }

func (r *recorder) Helper() {}
func (r *recorder) Errorf(format string, args ...any) {
	r.errs = append(r.errs, fmt.Sprintf(format, args...))
}

// wantReported fails unless some report contains each of want.
func wantReported(t *testing.T, what string, r *recorder, want ...string) {
	t.Helper()
	all := strings.Join(r.errs, "\n")
	for _, w := range want {
		if !strings.Contains(all, w) {
			t.Errorf("%s: no report mentions %q; reports:\n%s", what, w, all)
		}
	}
}

// TestChecksCatch feeds each check output of the kinds the fuzzer hunts
// for, so a check that silently passes everything fails here.
func TestChecksCatch(t *testing.T) {
	fake := knftables.NewFake(knftables.IPv4Family, "kube-proxy")
	tx := fake.NewTransaction()
	tx.Add(&knftables.Table{})
	tx.Add(&knftables.Chain{Name: "c"})
	tx.Add(&knftables.Set{Name: "allow", Type: "ipv4_addr . inet_service . ipv4_addr", Flags: []knftables.SetFlag{knftables.IntervalFlag}})
	tx.Add(&knftables.Map{Name: "vmap", Type: "ipv4_addr . inet_proto . inet_service : verdict"})
	for _, key := range [][]string{{"10.0.0.1", "80", "10.0.0.0/8"}, {"10.0.0.1", "80", "10.1.0.0/16"}, {"10.0.0.1", "81", "10.0.0.0/8"}} {
		tx.Add(&knftables.Element{Set: "allow", Key: key})
	}
	bad := map[string][]string{
		"fd00::1": {"fd00::1", "tcp", "80"}, "mapped": {"::ffff:10.0.0.1", "tcp", "80"}, "zone": {"10.0.0.1%x", "tcp", "80"},
		"icmp": {"10.0.0.2", "icmp", "80"}, "port": {"10.0.0.3", "tcp", "0"},
	}
	for _, key := range bad {
		tx.Add(&knftables.Element{Map: "vmap", Key: key, Value: []string{"goto c"}})
	}
	if err := fake.Run(context.Background(), tx); err != nil {
		t.Fatal(err)
	}
	r := &recorder{}
	checkNFT(r, proxy.IPv4, fake)
	wantReported(t, "nftables", r, `"10.0.0.1 . 80 . 10.0.0.0/8" and "10.0.0.1 . 80 . 10.1.0.0/16" overlap`,
		"fd00::1 is not IPv4", "::ffff:10.0.0.1", "newline, % or quote", `protocol "icmp"`, `port "0"`)
	if strings.Contains(strings.Join(r.errs, "\n"), "81 . 10.0.0.0/8\" overlap") {
		t.Errorf("elements with other non-interval fields reported as overlapping: %v", r.errs)
	}

	r = &recorder{}
	ipt := kiptables.NewFake()
	ipt.Restores = [][]byte{[]byte("*nat\n-A X -s 10.0.0.1%x -j Y\nflush ruleset\n-A X -d fd00::1 -m comment --comment a\"b -j Y\n-A X -s 10.0.0 -j Y\n-A X -d fd00::1 -j Y\n" +
		"-A X -d 10.0.0.1 -j DNAT --to-destination [::ffff:10.0.0.2]:80\nCOMMIT\n")}
	checkRestores(r, "iptables", proxy.IPv4, ipt)
	wantReported(t, "iptables", r, "odd character", "not an address or prefix", "injected line", "unquoted comment", "fd00::1 is not IPv4", "::ffff:10.0.0.2 is IPv4-mapped")

	r = &recorder{}
	st := &desired.State{Family: proxy.IPv4, Services: model.PortMap[*desired.ServicePort]{}, NodeIPs: []netip.Addr{netip.MustParseAddr("1.2.3.4")}}
	for i, name := range []string{"a", "b"} {
		n := proxy.ServicePortName{ServiceName: proxy.ServiceName{Namespace: "ns", Name: name}, Protocol: proxy.TCP}
		st.Services = st.Services.With(n, &desired.ServicePort{Name: n, Protocol: proxy.TCP, Port: 80, ClusterIP: netip.MustParseAddr("10.0.0.1"),
			ExternalIPs:    []netip.Addr{netip.MustParseAddr("::ffff:1.2.3.4"), netip.MustParseAddr("1.2.3.4")},
			AllowedSources: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("10.0.0.0/16")}})
		st.Service(n).NodePort = uint16(30000 + i)
	}
	checkState(r, st, nil)
	wantReported(t, "state", r, "claimed by", "IPv4-mapped", "overlap", "1.2.3.4 is a node address")

	r = &recorder{}
	n := proxy.ServicePortName{ServiceName: proxy.ServiceName{Namespace: "ns", Name: "c"}, Protocol: proxy.TCP}
	st = &desired.State{Family: proxy.IPv4, Services: model.PortMap[*desired.ServicePort]{}.With(n, &desired.ServicePort{
		Name: n, Protocol: proxy.TCP, Port: 80, ClusterIP: netip.MustParseAddr("10.0.0.3"),
		ExternalIPs: []netip.Addr{netip.MustParseAddr("1.2.3.5")},
		Cluster:     desired.Dispatch{Endpoints: []desired.Endpoint{{IP: netip.MustParseAddr("224.0.0.5"), Port: 80}}},
	})}
	checkState(r, st, []netip.Addr{netip.MustParseAddr("1.2.3.5")})
	wantReported(t, "state", r, "1.2.3.5 is a node address", "224.0.0.5 can be nobody's endpoint")
	r = &recorder{}
	checkLostAsFull(r, &desired.State{Family: proxy.IPv4}, &desired.State{Family: proxy.IPv4,
		Lost: map[proxy.ServicePortName][]desired.LostFrontend{n: {{Addr: netip.MustParseAddr("1.2.3.5"), Refused: desired.RefusedNodeAddress}}}})
	wantReported(t, "lost", r, "a full Compute says 1")
}
