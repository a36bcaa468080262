package iptables_test

import (
	"context"
	"encoding/binary"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/svcproxy/svcproxy/pkg/kiptables"
	"github.com/svcproxy/svcproxy/pkg/knfacct"
	"github.com/svcproxy/svcproxy/pkg/pipeline/backends/iptables"
	"github.com/svcproxy/svcproxy/pkg/pipeline/desired"
	"github.com/svcproxy/svcproxy/pkg/pipeline/metrics"
	"github.com/svcproxy/svcproxy/pkg/proxy"
	"github.com/svcproxy/svcproxy/pkg/testing/netnstest"
	"github.com/svcproxy/svcproxy/pkg/testing/netnstest/scenario"
	"github.com/svcproxy/svcproxy/pkg/testing/proxytest"
)

// The metric of each nfacct object (pkg/pipeline/metrics/nfacct.go).
var acctMetric = map[string]string{
	metrics.NFAcctLocalhostNodePortAccepted: "kubeproxy_iptables_localhost_nodeports_accepted_packets_total",
	metrics.NFAcctCTStateInvalidDropped:     "kubeproxy_iptables_ct_state_invalid_dropped_packets_total",
}

// nfacctNode is node1 programmed by an IPv4 Proxier with localhostNodePorts
// and nfacct, and the metrics registry reading its objects.
type nfacctNode struct {
	env  *scenario.Env
	acct *knfacct.Client
	reg  *prometheus.Registry
}

// TestKernelNFAcct: the nfacct objects are created in the node namespace
// only and count what upstream's do, as read through knfacct and as the
// metrics show it.
func TestKernelNFAcct(t *testing.T) {
	requireKernel(t)
	for _, fl := range flavours {
		t.Run(string(fl), func(t *testing.T) {
			n := newNFAcctNode(t, fl)
			t.Run("LocalhostNodePortAccepted", n.localhostNodePort)
			t.Run("CTStateInvalidDropped", n.invalidDropped)
		})
	}
}

func newNFAcctNode(t *testing.T, fl kiptables.Flavour) *nfacctNode {
	n := &nfacctNode{env: scenario.NewEnv(t), reg: prometheus.NewRegistry()}
	node := n.env.Node1.NS
	var p *iptables.Proxier
	err := node.Do(func() (err error) {
		if n.acct, err = knfacct.New(); err != nil {
			return err
		}
		p, err = iptables.New(context.Background(), proxy.IPv4, iptables.Options{
			Flavour: fl, SyncPeriod: 30 * time.Second, NFAcct: n.acct,
			EnsureRouteLocalnet: func() error { return node.Sysctl("net.ipv4.conf.all.route_localnet", "1") },
		})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(n.acct.Close)
	for _, c := range metrics.NFAcctCollectors(n.acct) {
		if err := n.reg.Register(c); err != nil {
			t.Fatal(err)
		}
	}
	st := n.env.NewWorld(scenario.Families[0]).Configure(func(o *desired.Options) {
		o.Localhost = desired.LocalhostModeDNAT
	}).Apply(t, n.env.ServiceNamed(t, "spread"))
	if err := node.Do(func() error { return p.Sync(context.Background(), st, proxytest.ModeOf(st)) }); err != nil {
		t.Fatalf("sync: %v", err)
	}
	// iptables-save prints two spaces after --nfacct-name.
	rules := strings.Join(strings.Fields(save(t, node, proxy.IPv4, fl)), " ")
	for name := range acctMetric {
		if !strings.Contains(rules, "-m nfacct --nfacct-name "+name) {
			t.Fatalf("no rule counts into %s:\n%s", name, save(t, node, proxy.IPv4, fl))
		}
	}
	return n
}

// localhostNodePort is upstream's e2e "should update metric for tracking
// accepted packets destined for localhost nodeports" inside the node: 10
// connections to 127.0.0.1:<nodePort> are answered and counted.
func (n *nfacctNode) localhostNodePort(t *testing.T) {
	const name = metrics.NFAcctLocalhostNodePortAccepted
	before := n.packets(t, name)
	dst := netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), uint16(n.env.ServiceNamed(t, "spread").NodePort))
	for i := range 10 {
		if _, err := (netnstest.Client{NS: n.env.Node1.NS}).Ask(proxy.TCP, dst); err != nil {
			t.Fatalf("connection %d to %s from the node: %v", i, dst, err)
		}
	}
	after := n.packets(t, name)
	t.Logf("%s: %d before, %d after 10 connections", name, before, after)
	if after < before+10 {
		t.Errorf("%s went from %d to %d over 10 connections, want +10 or more", name, before, after)
	}
}

// invalidDropped sends, from the outside client through the node to a pod,
// ICMP errors about a connection conntrack does not know: conntrack gives
// them no entry (ctstate INVALID), so KUBE-FORWARD drops and counts them.
func (n *nfacctNode) invalidDropped(t *testing.T) {
	const name = metrics.NFAcctCTStateInvalidDropped
	before := n.packets(t, name)
	client, pod := n.env.Allowed[0], n.env.Pods["pod-a"].IPv4
	err := n.env.Client.Do(func() error {
		c, err := net.ListenPacket("ip4:icmp", client.String())
		if err != nil {
			return err
		}
		defer c.Close()
		for range 3 {
			if _, err := c.WriteTo(strayPortUnreachable(pod, client), &net.IPAddr{IP: pod.AsSlice()}); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	after := n.packets(t, name)
	t.Logf("%s: %d before, %d after 3 stray ICMP errors", name, before, after)
	if after < before+3 {
		t.Errorf("%s went from %d to %d over 3 INVALID packets, want +3 or more", name, before, after)
	}
}

// strayPortUnreachable is an ICMP port unreachable that quotes a TCP
// segment from→to (ports 8080 → 40000) of no tracked connection.
func strayPortUnreachable(from, to netip.Addr) []byte {
	inner := make([]byte, 28)
	inner[0], inner[8], inner[9] = 0x45, 64, 6 // IPv4, 20-byte header; TTL; TCP
	binary.BigEndian.PutUint16(inner[2:], 40)
	copy(inner[12:16], from.AsSlice())
	copy(inner[16:20], to.AsSlice())
	binary.BigEndian.PutUint16(inner[10:], checksum(inner[:20]))
	binary.BigEndian.PutUint16(inner[20:], 8080)
	binary.BigEndian.PutUint16(inner[22:], 40000)
	msg := append([]byte{3, 3, 0, 0, 0, 0, 0, 0}, inner...) // destination unreachable, port
	binary.BigEndian.PutUint16(msg[2:], checksum(msg))
	return msg
}

// checksum is the Internet checksum (RFC 1071).
func checksum(b []byte) uint16 {
	var sum uint32
	for i := 0; i+1 < len(b); i += 2 {
		sum += uint32(b[i])<<8 | uint32(b[i+1])
	}
	if len(b)%2 == 1 {
		sum += uint32(b[len(b)-1]) << 8
	}
	for sum > 0xffff {
		sum = sum>>16 + sum&0xffff
	}
	return ^uint16(sum)
}

// packets reads the object name through knfacct and through its metric,
// which must agree (nothing is sent between the two reads).
func (n *nfacctNode) packets(t *testing.T, name string) uint64 {
	t.Helper()
	count, err := n.acct.Get(name)
	if err != nil {
		t.Fatal(err)
	}
	mfs, err := n.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == acctMetric[name] {
			if v := mf.GetMetric()[0].GetCounter().GetValue(); v != float64(count) {
				t.Errorf("%s = %v, but %s counts %d", acctMetric[name], v, name, count)
			}
			return count
		}
	}
	t.Fatalf("%s is not in the scrape", acctMetric[name])
	return 0
}
