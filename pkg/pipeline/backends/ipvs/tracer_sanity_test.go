package ipvs

import (
	"context"
	"net/netip"
	"testing"

	"github.com/svcproxy/svcproxy/pkg/kipset"
	"github.com/svcproxy/svcproxy/pkg/kiptables"
	"github.com/svcproxy/svcproxy/pkg/pipeline/desired"
	"github.com/svcproxy/svcproxy/pkg/proxy"
	"github.com/svcproxy/svcproxy/pkg/testing/proxytest"
)

// TestTracerNoticesBrokenState guards the tracer against passing
// vacuously: removing a real server, a set member or a rule must change
// what it reports.
func TestTracerNoticesBrokenState(t *testing.T) {
	f := newFakes()
	a := svcPort("a", 1, w4.RemotePod(1), w4.RemotePod(2))
	st := baseState(proxy.IPv4, a)
	mustSync(t, newProxier(f, proxy.IPv4, Options{}), st)
	tr := &tracer{t: t, f: f, state: st}
	fromOutside := proxytest.Flow{Source: w4.ExternalClient, Protocol: proxy.TCP, Dest: a.ClusterIP, DestPort: 80}
	if got := tr.trace(fromOutside); got.Verdict != proxytest.DNAT || len(got.Endpoints) != 2 || !got.Masquerade {
		t.Fatalf("intact: got %s, want DNAT to both, masqueraded", got)
	}
	unknownPort := fromOutside
	unknownPort.DestPort = 81
	if got := tr.trace(unknownPort); got.Verdict != proxytest.Reject {
		t.Errorf("unknown port on a cluster IP: got %s, want REJECT", got)
	}

	member := kipset.Entry{IP: a.ClusterIP, Protocol: kipset.TCP, Port: 80}
	if err := f.ipset.DelEntry(setClusterIP, member); err != nil {
		t.Fatal(err)
	}
	// Without its KUBE-CLUSTER-IP member, the service is no service to
	// KUBE-IPVS-FILTER any more.
	if got := tr.trace(fromOutside); got.Verdict != proxytest.Reject {
		t.Errorf("without the KUBE-CLUSTER-IP member: got %s, want REJECT", got)
	}
	if err := f.ipset.AddEntry(setClusterIP, member); err != nil {
		t.Fatal(err)
	}
	if err := f.ipt.DeleteRule(context.Background(), kiptables.TableNAT, kiptables.ChainPrerouting, jumps[1].rule...); err != nil {
		t.Fatal(err)
	}
	if got := tr.trace(fromOutside); got.Verdict != proxytest.DNAT || got.Masquerade {
		t.Errorf("without the PREROUTING jump: got %s, want DNAT unmasqueraded", got)
	}
	if err := f.ipvs.DeleteDestination(vsKey(a.ClusterIP, 80), netip.AddrPortFrom(w4.RemotePod(2), 8080)); err != nil {
		t.Fatal(err)
	}
	if got := tr.trace(fromOutside); len(got.Endpoints) != 1 {
		t.Errorf("after deleting a real server: got %s", got)
	}
}

// TestTranslationIsTheException counts the shared flows whose expectation
// IPVS mode changes: the differences must stay a documented minority.
func TestTranslationIsTheException(t *testing.T) {
	total, translated := 0, 0
	for _, c := range proxytest.Cases() {
		for _, fam := range proxy.Families {
			var st *desired.State
			for _, flow := range c.Flows {
				if !fam.Contains(flow.Dest) {
					continue
				}
				if st == nil {
					st = proxytest.BuildState(t, c, fam)
				}
				total++
				if !translate(st, flow, flow.Want).Equal(flow.Want) {
					translated++
				}
			}
		}
	}
	t.Logf("%d of %d flows have an IPVS-specific outcome", translated, total)
	if total == 0 || translated*4 > total {
		t.Errorf("%d of %d flows translated; the differences should be few", translated, total)
	}
}
