package leftovers

import (
	"context"
	"strings"
	"testing"

	"github.com/svcproxy/svcproxy/internal/backends"
	"github.com/svcproxy/svcproxy/pkg/proxy"
	"github.com/svcproxy/svcproxy/pkg/testing/netnstest"
)

// kernelEnv is a fresh node namespace whose tool runs are recorded.
type kernelEnv struct {
	ns    *netnstest.NS
	execs *netnstest.ExecLog
}

func newKernelEnv(t *testing.T) *kernelEnv {
	t.Helper()
	netnstest.RequireKernel(t, "nft", "ipset", "iptables-nft", "iptables-legacy")
	execs := netnstest.RecordExecs(t, netnstest.ProxyTools()...)
	ns, err := netnstest.New(t).NewNS("node")
	if err != nil {
		t.Fatal(err)
	}
	return &kernelEnv{ns: ns, execs: execs}
}

func (e *kernelEnv) run(t *testing.T, stdin, name string, args ...string) string {
	t.Helper()
	out, err := e.ns.RunInput(context.Background(), stdin, name, args...)
	if err != nil {
		t.Fatal(err)
	}
	return string(out)
}

// cleanup runs OtherModes for mode in the namespace and returns the tools
// it ran.
func (e *kernelEnv) cleanup(t *testing.T, mode proxy.Mode) []string {
	t.Helper()
	return e.execs.Runs(t, e.ns, func() error { return OtherModes(context.Background(), backends.Table, mode, nil) })
}

// TestOtherModesNothingToClean: a node that never ran another mode, and a
// node restarting in nftables mode with its table in place (the same
// families iptables-nft uses), start no process at all.
func TestOtherModesNothingToClean(t *testing.T) {
	e := newKernelEnv(t)
	for _, mode := range []proxy.Mode{proxy.ModeNFTables, proxy.ModeIPTables, proxy.ModeIPVS} {
		if ran := e.cleanup(t, mode); len(ran) > 0 {
			t.Errorf("%s mode, empty namespace: tools ran: %q", mode, ran)
		}
	}
	own := "table ip kube-proxy { chain nat-prerouting { type nat hook prerouting priority dstnat; } ; }\n"
	e.run(t, own, "nft", "-f", "-")
	if ran := e.cleanup(t, proxy.ModeNFTables); len(ran) > 0 {
		t.Errorf("nftables mode's own table present: tools ran: %q", ran)
	}
	if tables := e.run(t, "", "nft", "list", "tables"); !strings.Contains(tables, "table ip kube-proxy") {
		t.Errorf("nftables mode's own table removed: %q", tables)
	}
}

// TestOtherModesIPVSLeftovers: IPVS mode's link or ipsets are found without
// the IPVS client, and removed; the iptables flavour is detected once for
// both families.
func TestOtherModesIPVSLeftovers(t *testing.T) {
	t.Run("Link", func(t *testing.T) {
		e := newKernelEnv(t)
		// IPVS mode's link is a dummy; this kernel may lack the dummy
		// driver, and cleanup removes the link by name whatever its type.
		e.run(t, "", "ip", "link", "add", "kube-ipvs0", "type", "bridge")
		ran := e.cleanup(t, proxy.ModeNFTables)
		if links := e.run(t, "", "ip", "-o", "link", "show"); strings.Contains(links, "kube-ipvs0") {
			t.Errorf("kube-ipvs0 not removed: %s", links)
		}
		checkDetectedOnce(t, ran)
	})
	t.Run("IPSet", func(t *testing.T) {
		e := newKernelEnv(t)
		e.run(t, "", "ipset", "create", "KUBE-6-CLUSTER-IP", "hash:ip,port", "family", "inet6")
		ran := e.cleanup(t, proxy.ModeNFTables)
		if sets := e.run(t, "", "ipset", "list", "-n"); strings.Contains(sets, "KUBE-6-CLUSTER-IP") {
			t.Errorf("ipset not removed: %s", sets)
		}
		checkDetectedOnce(t, ran)
	})
}

// checkDetectedOnce checks that the iptables flavour was detected at most
// once (both families' IPVS clients need it). A detection asks
// iptables-nft for kubelet's hint chain (here, where iptables-legacy has
// none); iptables-legacy-save -t mangle alone is no sign of one: the
// detection's legacy probe creates the legacy mangle table, which the
// iptables cleanup, running after the IPVS cleanup, then reads.
func checkDetectedOnce(t *testing.T, ran []string) {
	t.Helper()
	detections := 0
	for _, r := range ran {
		if r == "iptables-nft -t mangle -L KUBE-IPTABLES-HINT -n" {
			detections++
		}
	}
	if detections > 1 {
		t.Errorf("the iptables flavour was detected %d times: %q", detections, ran)
	}
}
