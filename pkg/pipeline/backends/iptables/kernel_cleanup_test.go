package iptables_test

import (
	"context"
	"strings"
	"testing"

	"github.com/svcproxy/svcproxy/pkg/pipeline/backends/iptables"
	"github.com/svcproxy/svcproxy/pkg/proxy"
	"github.com/svcproxy/svcproxy/pkg/testing/netnstest"
)

// leftoverRules are what an iptables-mode kube-proxy leaves in the nat
// table (a jump from a built-in chain, a top-level and a service chain),
// beside kubelet's KUBE-FIREWALL in filter, which cleanup keeps.
const leftoverRules = `*nat
:KUBE-SERVICES - [0:0]
:KUBE-SVC-AAAAAAAAAAAAAAAA - [0:0]
-A PREROUTING -m comment --comment "kubernetes service portals" -j KUBE-SERVICES
-A KUBE-SERVICES -j KUBE-SVC-AAAAAAAAAAAAAAAA
COMMIT
*filter
:KUBE-FIREWALL - [0:0]
COMMIT
`

// TestCleanupLeftovers: with nothing left by iptables mode, no tool runs;
// with leftovers in one flavour, only that flavour's tools run and the
// leftovers go, kubelet's chain stays.
func TestCleanupLeftovers(t *testing.T) {
	requireKernel(t)
	execs := netnstest.RecordExecs(t, netnstest.ProxyTools()...)
	ctx := context.Background()
	cleanup := func() error { return iptables.CleanupLeftovers(ctx) }
	t.Run("Nothing", func(t *testing.T) {
		ns := freshNS(t)
		if ran := execs.Runs(t, ns, cleanup); len(ran) > 0 {
			t.Errorf("tools ran with nothing to clean: %q", ran)
		}
	})
	t.Run("KubeletChainsOnly", func(t *testing.T) {
		ns := freshNS(t)
		kubelet := "*mangle\n:KUBE-IPTABLES-HINT - [0:0]\nCOMMIT\n*filter\n:KUBE-FIREWALL - [0:0]\nCOMMIT\n"
		if _, err := ns.RunInput(ctx, kubelet, "iptables-nft-restore", "--noflush"); err != nil {
			t.Fatal(err)
		}
		if ran := execs.Runs(t, ns, cleanup); len(ran) > 0 {
			t.Errorf("tools ran with only kubelet's chains present: %q", ran)
		}
	})
	for _, fl := range flavours {
		t.Run(string(fl), func(t *testing.T) {
			ns := freshNS(t)
			for _, f := range proxy.Families {
				if _, err := ns.RunInput(ctx, leftoverRules, tool(f, fl)+"-restore", "--noflush"); err != nil {
					t.Fatal(err)
				}
			}
			for _, run := range execs.Runs(t, ns, cleanup) {
				if !strings.Contains(strings.Fields(run)[0], "-"+string(fl)) {
					t.Errorf("cleanup of %s leftovers ran %q", fl, run)
				}
			}
			for _, f := range proxy.Families {
				save, err := ns.Run(ctx, tool(f, fl)+"-save")
				if err != nil {
					t.Fatal(err)
				}
				if s := string(save); strings.Contains(s, "KUBE-SERVICES") || strings.Contains(s, "KUBE-SVC-") {
					t.Errorf("%s: leftovers not removed:\n%s", tool(f, fl), s)
				} else if !strings.Contains(s, ":KUBE-FIREWALL") {
					t.Errorf("%s: kubelet's KUBE-FIREWALL removed:\n%s", tool(f, fl), s)
				}
			}
		})
	}
}

// freshNS is a new network namespace, deleted when t ends.
func freshNS(t *testing.T) *netnstest.NS {
	t.Helper()
	ns, err := netnstest.New(t).NewNS("node")
	if err != nil {
		t.Fatal(err)
	}
	return ns
}
