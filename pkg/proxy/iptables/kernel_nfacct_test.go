package iptables_test

import (
	"context"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/svcproxy/svcproxy/internal/kiptables"
	"github.com/svcproxy/svcproxy/internal/knfacct"
	"github.com/svcproxy/svcproxy/internal/metrics"
	"github.com/svcproxy/svcproxy/internal/netnstest"
	"github.com/svcproxy/svcproxy/internal/netnstest/scenario"
	"github.com/svcproxy/svcproxy/pkg/proxy"
	"github.com/svcproxy/svcproxy/pkg/proxy/iptables"
)

const localhostMetric = "kubeproxy_iptables_localhost_nodeports_accepted_packets_total"

// TestKernelNFAcct is upstream's e2e "should update metric for tracking
// accepted packets destined for localhost nodeports" in a node namespace:
// with localhostNodePorts and nfacct, 10 connections from the node to
// 127.0.0.1:<nodePort> are answered and raise localhost_nps_accepted_pkts
// by at least 10, as read through knfacct and as the metric shows it. The
// nfacct objects are created in the node namespace only.
func TestKernelNFAcct(t *testing.T) {
	requireKernel(t)
	for _, fl := range flavours {
		t.Run(string(fl), func(t *testing.T) { testNFAcct(t, fl) })
	}
}

func testNFAcct(t *testing.T, fl kiptables.Flavour) {
	env := scenario.NewEnv(t)
	node := env.Node1.NS
	var acct *knfacct.Client
	var p *iptables.Proxier
	err := node.Do(func() (err error) {
		if acct, err = knfacct.New(); err != nil {
			return err
		}
		p, err = iptables.New(context.Background(), proxy.IPv4, iptables.Options{
			Flavour: fl, SyncPeriod: 30 * time.Second, LocalhostNodePorts: true, NFAcct: acct,
			EnsureRouteLocalnet: func() error { return node.Sysctl("net.ipv4.conf.all.route_localnet", "1") },
		})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(acct.Close)
	reg := prometheus.NewRegistry()
	if err := metrics.Register(reg, metrics.ModeIPTables, metrics.WithoutRuntimeCollectors(), metrics.WithNFAcct(acct)); err != nil {
		t.Fatal(err)
	}
	spread := env.ServiceNamed(t, "spread")
	fam := scenario.Families[0]
	if err := node.Do(func() error {
		return p.Sync(context.Background(), env.NewWorld(fam).Apply(t, spread))
	}); err != nil {
		t.Fatalf("sync: %v", err)
	}
	// iptables-save prints two spaces after --nfacct-name.
	rules := strings.Join(strings.Fields(save(t, node, proxy.IPv4, fl)), " ")
	for _, name := range []string{metrics.NFAcctLocalhostNodePortAccepted, metrics.NFAcctCTStateInvalidDropped} {
		if !strings.Contains(rules, "-m nfacct --nfacct-name "+name) {
			t.Fatalf("no rule counts into %s:\n%s", name, save(t, node, proxy.IPv4, fl))
		}
	}
	before := packets(t, acct, reg)
	dst := netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), uint16(spread.NodePort))
	for i := range 10 {
		if _, err := (netnstest.Client{NS: node}).Ask(proxy.TCP, dst); err != nil {
			t.Fatalf("connection %d to %s from the node: %v", i, dst, err)
		}
	}
	after := packets(t, acct, reg)
	t.Logf("%s: %d before, %d after", metrics.NFAcctLocalhostNodePortAccepted, before, after)
	if after < before+10 {
		t.Errorf("%s went from %d to %d over 10 connections, want +10 or more", metrics.NFAcctLocalhostNodePortAccepted, before, after)
	}
}

// packets reads localhost_nps_accepted_pkts through knfacct and the metric,
// which must agree (no traffic flows between the two reads).
func packets(t *testing.T, acct knfacct.Interface, reg *prometheus.Registry) uint64 {
	t.Helper()
	n, err := acct.Get(metrics.NFAcctLocalhostNodePortAccepted)
	if err != nil {
		t.Fatal(err)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == localhostMetric {
			if v := mf.GetMetric()[0].GetCounter().GetValue(); v != float64(n) {
				t.Errorf("%s = %v, but the object counts %d", localhostMetric, v, n)
			}
			return n
		}
	}
	t.Fatalf("%s is not in the scrape", localhostMetric)
	return 0
}
