package contract

import (
	"strings"
	"testing"
)

// upstreamSave is an iptables-save of upstream's layout with one Service
// (the chains and jumps only; rule matches trimmed).
const upstreamSave = `*mangle
:PREROUTING ACCEPT [0:0]
:KUBE-PROXY-CANARY - [0:0]
COMMIT
*filter
:INPUT ACCEPT [0:0]
:FORWARD ACCEPT [0:0]
:OUTPUT ACCEPT [0:0]
:KUBE-EXTERNAL-SERVICES - [0:0]
:KUBE-FIREWALL - [0:0]
:KUBE-FORWARD - [0:0]
:KUBE-NODEPORTS - [0:0]
:KUBE-PROXY-CANARY - [0:0]
:KUBE-PROXY-FIREWALL - [0:0]
:KUBE-SERVICES - [0:0]
-A INPUT -m conntrack --ctstate NEW -m comment --comment "kubernetes load balancer firewall" -j KUBE-PROXY-FIREWALL
-A INPUT -m comment --comment "kubernetes health check service ports" -j KUBE-NODEPORTS
-A INPUT -m conntrack --ctstate NEW -m comment --comment "kubernetes externally-visible service portals" -j KUBE-EXTERNAL-SERVICES
-A INPUT -j KUBE-FIREWALL
-A FORWARD -m conntrack --ctstate NEW -m comment --comment "kubernetes load balancer firewall" -j KUBE-PROXY-FIREWALL
-A FORWARD -m comment --comment "kubernetes forwarding rules" -j KUBE-FORWARD
-A FORWARD -m conntrack --ctstate NEW -m comment --comment "kubernetes service portals" -j KUBE-SERVICES
-A FORWARD -m conntrack --ctstate NEW -m comment --comment "kubernetes externally-visible service portals" -j KUBE-EXTERNAL-SERVICES
-A OUTPUT -m conntrack --ctstate NEW -m comment --comment "kubernetes load balancer firewall" -j KUBE-PROXY-FIREWALL
-A OUTPUT -m conntrack --ctstate NEW -m comment --comment "kubernetes service portals" -j KUBE-SERVICES
-A OUTPUT -j KUBE-FIREWALL
-A KUBE-FORWARD -m conntrack --ctstate INVALID -j DROP
COMMIT
*nat
:PREROUTING ACCEPT [0:0]
:OUTPUT ACCEPT [0:0]
:POSTROUTING ACCEPT [0:0]
:KUBE-MARK-MASQ - [0:0]
:KUBE-NODEPORTS - [0:0]
:KUBE-POSTROUTING - [0:0]
:KUBE-PROXY-CANARY - [0:0]
:KUBE-SEP-AAAAAAAAAAAAAAAA - [0:0]
:KUBE-SERVICES - [0:0]
:KUBE-SVC-BBBBBBBBBBBBBBBB - [0:0]
-A PREROUTING -m comment --comment "kubernetes service portals" -j KUBE-SERVICES
-A OUTPUT -m comment --comment "kubernetes service portals" -j KUBE-SERVICES
-A POSTROUTING -m comment --comment "kubernetes postrouting rules" -j KUBE-POSTROUTING
-A KUBE-SEP-AAAAAAAAAAAAAAAA -p tcp -m tcp -j DNAT --to-destination 10.244.1.11:8080
-A KUBE-SERVICES -d 10.96.0.10/32 -p tcp -m tcp --dport 80 -j KUBE-SVC-BBBBBBBBBBBBBBBB
-A KUBE-SVC-BBBBBBBBBBBBBBBB -j KUBE-SEP-AAAAAAAAAAAAAAAA
COMMIT
`

// TestIPTablesLeftovers checks the rollback tests' iptables check on
// upstream's layout and on each kind of leftover it must find.
func TestIPTablesLeftovers(t *testing.T) {
	if got := iptablesLeftovers(parseIPTablesSave(upstreamSave)); len(got) != 0 {
		t.Fatalf("upstream's own layout: %v", got)
	}
	const (
		canary  = ":KUBE-PROXY-CANARY - [0:0]\nCOMMIT\n*filter\n"
		svc     = ":KUBE-SVC-BBBBBBBBBBBBBBBB - [0:0]\n"
		natOut  = "-A OUTPUT -m comment --comment \"kubernetes service portals\" -j KUBE-SERVICES\n"
		postr   = "-A POSTROUTING -m comment --comment \"kubernetes postrouting rules\" -j KUBE-POSTROUTING\n"
		kubelet = "-A INPUT -j KUBE-FIREWALL\n"
	)
	for _, tc := range []struct{ name, old, new, want string }{
		{"a chain of another name", canary, ":KUBE-X - [0:0]\n" + canary,
			"table mangle: chain KUBE-X is none of upstream's"},
		{"an unreferenced service chain", svc, svc + ":KUBE-SEP-CCCCCCCCCCCCCCCC - [0:0]\n",
			"table nat: chain KUBE-SEP-CCCCCCCCCCCCCCCC is left unreferenced"},
		{"a second jump", natOut, natOut + natOut, `jump "nat OUTPUT KUBE-SERVICES": 2 rules, want upstream's one`},
		{"a jump of another's", postr, postr + "-A POSTROUTING -j KUBE-MARK-MASQ\n",
			`jump "nat POSTROUTING KUBE-MARK-MASQ" is not upstream's`},
		{"a missing jump", kubelet, "", `jump "filter INPUT KUBE-FIREWALL": 0 rules, want upstream's one`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if !strings.Contains(upstreamSave, tc.old) {
				t.Fatalf("%q is not in the dump", tc.old)
			}
			got := iptablesLeftovers(parseIPTablesSave(strings.Replace(upstreamSave, tc.old, tc.new, 1)))
			if len(got) != 1 || got[0] != tc.want {
				t.Errorf("got %q, want [%q]", got, tc.want)
			}
		})
	}
}
