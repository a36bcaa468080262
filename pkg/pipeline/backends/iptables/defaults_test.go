package iptables

import (
	"slices"
	"strings"
	"testing"

	"github.com/svcproxy/svcproxy/pkg/kiptables"
	"github.com/svcproxy/svcproxy/pkg/pipeline/desired"
	"github.com/svcproxy/svcproxy/pkg/proxy"
	"github.com/svcproxy/svcproxy/pkg/testing/proxytest"
)

// TestUpstreamDefaults traces the two behaviours where upstream's iptables
// mode, with its defaults, differs from the shared flows (which
// flowOptions configures away): unknown cluster-IP ports pass unrejected,
// and localhostNodePorts opens IPv4 node ports on 127.0.0.0/8.
func TestUpstreamDefaults(t *testing.T) {
	w := proxytest.WorldOf(proxy.IPv4)
	st := caseState(t, "cluster IP", proxy.IPv4)
	fake, _ := syncFake(t, st, Options{})
	unknown := proxytest.Flow{Source: w.RemotePod(9), Protocol: proxy.TCP, Dest: w.ClusterIP(1), DestPort: 81}
	if got := newTracer(t, fake, st).trace(unknown); got.Verdict != proxytest.Accept {
		t.Errorf("unknown cluster-IP port by default: got %s, want ACCEPT", got)
	}

	lo := proxytest.Flow{Source: w.Loopback, Protocol: proxy.TCP, Dest: w.Loopback, DestPort: 30080, FromHost: true}
	for _, on := range []bool{false, true} {
		np := caseStateWith(t, "node port on every local address by default", proxy.IPv4, func(o *desired.Options) {
			if on {
				localhostIPTables(o)
			}
		})
		fake, _ := syncFake(t, np, Options{})
		got := newTracer(t, fake, np).trace(lo)
		if want := map[bool]proxytest.Verdict{false: proxytest.Accept, true: proxytest.DNAT}[on]; got.Verdict != want {
			t.Errorf("localhostNodePorts=%t: 127.0.0.1:30080 got %s, want %s", on, got, want)
		}
		hasFirewall := len(fake.Table(kiptables.TableFilter).Chains[chainKubeletFirewall].Rules) > 0
		if hasFirewall != on {
			t.Errorf("localhostNodePorts=%t: KUBE-FIREWALL rule present = %t", on, hasFirewall)
		}
	}
	// IPv6 never opens ::1 implicitly.
	np6 := caseStateWith(t, "node port on every local address by default", proxy.IPv6, localhostIPTables)
	fake6, _ := syncFake(t, np6, Options{})
	w6 := proxytest.WorldOf(proxy.IPv6)
	lo6 := proxytest.Flow{Source: w6.Loopback, Protocol: proxy.TCP, Dest: w6.Loopback, DestPort: 30080, FromHost: true}
	if got := newTracer(t, fake6, np6).trace(lo6); got.Verdict != proxytest.Accept {
		t.Errorf("IPv6 ::1 node port: got %s, want ACCEPT", got)
	}
}

// TestTracerNoticesBrokenRules guards the tracer against passing
// vacuously: without the cluster-IP rule, the DNAT is gone.
func TestTracerNoticesBrokenRules(t *testing.T) {
	st := caseState(t, "cluster IP", proxy.IPv4)
	fake, _ := syncFake(t, st, flowOptions)
	w := proxytest.WorldOf(proxy.IPv4)
	flow := proxytest.Flow{Source: w.RemotePod(9), Protocol: proxy.TCP, Dest: w.ClusterIP(1), DestPort: 80}
	if got := newTracer(t, fake, st).trace(flow); got.Verdict != proxytest.DNAT || len(got.Endpoints) != 2 {
		t.Fatalf("intact rules: got %s", got)
	}
	var kept []string
	for _, r := range fake.Table(kiptables.TableNAT).Chains[chainServices].Rules {
		if !slices.Contains(kiptables.SplitRule(r), "ns1/web:http cluster IP") {
			kept = append(kept, r)
		}
	}
	data := "*nat\n:KUBE-SERVICES - [0:0]\n"
	for _, r := range kept {
		data += "-A KUBE-SERVICES " + r + "\n"
	}
	if err := fake.Restore(ctx, []byte(data+"COMMIT\n")); err != nil {
		t.Fatal(err)
	}
	if got := newTracer(t, fake, st).trace(flow); got.Verdict != proxytest.Reject {
		t.Errorf("without the cluster-IP rule: got %s, want REJECT (unknown port)", got)
	}
}

// TestLoopbackNodePortAddresses: nodePortAddresses that select a loopback
// address open node ports there only where upstream does — IPv4 with
// localhostNodePorts — and only then add the KUBE-FIREWALL localnet rule;
// ::1 never gets a rule (upstream logs and skips it). desired decides
// (State.NodePorts.Localhost); the rules follow.
func TestLoopbackNodePortAddresses(t *testing.T) {
	for _, family := range proxy.Families {
		w := proxytest.WorldOf(family)
		for _, on := range []bool{false, true} {
			st := caseStateWith(t, "node port on every local address by default", family, func(o *desired.Options) {
				o.NodePortAddresses = []string{"primary", "localhost"}
				if on {
					localhostIPTables(o)
				}
			})
			fake, _ := syncFake(t, st, Options{})
			opened := family == proxy.IPv4 && on
			services := strings.Join(fake.Table(kiptables.TableNAT).Chains[chainServices].Rules, "\n")
			if got := strings.Contains(services, "-d "+w.Loopback.String()+" "); got != opened {
				t.Errorf("%s localhostNodePorts=%t: KUBE-SERVICES jumps for %s = %t, want %t:\n%s", family, on, w.Loopback, got, opened, services)
			}
			if !strings.Contains(services, "-d "+w.NodeIP.String()+" ") {
				t.Errorf("%s localhostNodePorts=%t: no jump for the node IP:\n%s", family, on, services)
			}
			hasFirewall := len(fake.Table(kiptables.TableFilter).Chains[chainKubeletFirewall].Rules) > 0
			if hasFirewall != opened {
				t.Errorf("%s localhostNodePorts=%t: KUBE-FIREWALL localnet rule present = %t, want %t", family, on, hasFirewall, opened)
			}
		}
	}
}
