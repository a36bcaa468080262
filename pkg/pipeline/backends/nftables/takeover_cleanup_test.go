package nftables

import (
	"strings"
	"testing"

	"github.com/svcproxy/svcproxy/pkg/proxy"
)

// upstreamFirewall is what upstream kube-proxy's nftables mode keeps for
// a Service port with loadBalancerSourceRanges, in place of svcproxy's
// guard set: the verdict map firewall-ips, whose element for the port
// goes to a firewall chain of its own, read by the firewall-check rule.
// Taken over, all three are stale, and the map's element names the chain
// until the map goes.
func upstreamFirewall(lb, allowed string) string {
	return `add map ip kube-proxy firewall-ips { type ipv4_addr . inet_proto . inet_service : verdict ; comment "destinations that are subject to LoadBalancerSourceRanges" ; }
add chain ip kube-proxy ` + upstreamFirewallChain + `
add rule ip kube-proxy ` + upstreamFirewallChain + ` ip saddr != { ` + allowed + ` } drop
add element ip kube-proxy firewall-ips { ` + lb + ` . tcp . 80 : goto ` + upstreamFirewallChain + ` }
`
}

const upstreamFirewallChain = "firewall-HVFWP5L3-ns5/svc5/tcp/p80"

// upstreamFirewallCheck is upstream's firewall-check rule, which replaces
// svcproxy's in a table upstream kube-proxy synced last.
var upstreamFirewallCheck = strings.NewReplacer(
	`firewall-check ip daddr . meta l4proto . th dport @firewall-guards ip daddr . meta l4proto . th dport . ip saddr != @firewall-allow drop comment "13874fff39ab"`,
	`firewall-check ip daddr . meta l4proto . th dport vmap @firewall-ips`)

// withUpstreamFirewall is dump (a table of svcproxy's unmarked layout) as
// upstream kube-proxy leaves it: the firewall objects for the TCP port 80
// of load balancer IP lb added, its firewall-check rule in place of
// svcproxy's.
func withUpstreamFirewall(t *testing.T, dump, lb, allowed string) string {
	t.Helper()
	out := upstreamFirewallCheck.Replace(dump)
	if out == dump {
		t.Fatal("the dump has no firewall-check rule of svcproxy's to replace")
	}
	return strings.Replace(out, "\nadd rule ", "\n"+upstreamFirewall(lb, allowed)+"add rule ", 1)
}

// TestTakeoverDeletesUpstreamFirewallInOneSync takes over a table whose
// firewall chain is still the target of upstream's firewall-ips map: the
// first sync must delete the map before the chain (the kernel refuses to
// delete a chain a verdict still names, EBUSY), and so end without a
// cleanup failure and without the upstream objects.
func TestTakeoverDeletesUpstreamFirewallInOneSync(t *testing.T) {
	dump := withUpstreamFirewall(t, readDump(t, "unmarked-loadbalancersourceranges-ipv4.dump"), "192.0.2.3", "203.0.113.0/24")
	fake, st, _ := fakeWith(t, proxy.IPv4, dump)
	p := NewWithInterface(proxy.IPv4, fakeKernel(fake))
	if err := p.Sync(t.Context(), st, proxy.RecoverySync); err != nil {
		t.Fatalf("the takeover's first sync: %v", err)
	}
	if _, ok := fake.Table.Chains[upstreamFirewallChain]; ok {
		t.Errorf("upstream's chain %s is still there", upstreamFirewallChain)
	}
	if _, ok := fake.Table.Maps["firewall-ips"]; ok {
		t.Error("upstream's map firewall-ips is still there")
	}
	if stats := mustSync(t, p, st); stats.Operations != 0 {
		t.Errorf("the sync after the takeover sent %d operations, want 0:\n%s", stats.Operations, fake.LastTransaction)
	}
}
