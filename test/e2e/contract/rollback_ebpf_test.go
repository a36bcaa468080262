package contract

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	F "github.com/svcproxy/svcproxy/test/e2e/framework"
)

// TestEBPFRollback rolls one node from svcproxy's ebpf mode, with the tc
// programs, back to upstream kube-proxy in nftables mode, then takes it
// over again (see ebpfRollback).
func TestEBPFRollback(t *testing.T) { ebpfRollback(t, nftablesRollback) }

// TestEBPFRollbackIPTables is TestEBPFRollback to upstream's iptables mode.
func TestEBPFRollbackIPTables(t *testing.T) { ebpfRollback(t, iptablesRollback) }

// tcInterface is the node interface the tc programs run on.
const tcInterface = "eth0"

// ebpfRollback takes one node through the rollback migration.md documents
// for ebpf mode, which upstream has not: first svcproxy itself in mode m
// (the ConfigMap's mode changed, the image not yet), whose start removes
// ebpf mode's hooks and tc programs once its own rules serve, then, once
// nothing of ebpf mode is left, upstream in mode m (the image swapped
// back). Last, upstream is taken over by svcproxy in ebpf mode again.
//
// Each switch is checked as testRollback checks one (switcher.to), under
// the same load: not one new connection may fail. After the rollback no
// BPF program may be attached to the node's cgroup or interface and the
// pin directory must be empty, and upstream alone must decide where
// connections go: an endpoint removed after the rollback is no longer
// reached, at a cluster IP (the socket hooks' part) or at a node port
// (the tc programs' part).
//
// It runs against the pinned upstream only: what is particular to ebpf
// mode is svcproxy's own first step; the second, svcproxy in mode m to
// upstream, is testRollback's, which runs every minor.
func ebpfRollback(t *testing.T, m rollbackMode) {
	up := pinnedUpstream(t)
	c := F.New(t, F.Options{Mode: "ebpf", TCInterfaces: []string{tcInterface}, Nodes: 1, NoProxy: true,
		SyncPeriod: 5 * time.Second})
	n := c.Nodes[0]
	sw := &switcher{t: t, c: c, n: n, mode: ebpfServing, up: up, before: createRollbackServices(t, c, n)}
	moved := createTwoEndpointService(t, c, n)
	sw.to("svcproxy", "svcproxy in ebpf mode with the tc programs (clean start)")
	expectEBPFServes(t, c, n, "before the rollback")
	sw.load = startSwitchLoad(t, c, n, sw.before)

	sw.switchMode(m)
	sw.to("svcproxy", "svcproxy in "+m.name+" mode (rollback step 1)")
	waitEBPFGone(t, c, n, "after rollback step 1")
	expectLeftoversRemovedLogged(t, c, n, "after rollback step 1")
	sw.to("upstream", up.version+" (rollback step 2)")
	expectNoEBPF(t, c, n, "after the rollback to "+up.version)
	moved.expectBothReached(t, c, n, "under "+up.version)
	moved.removeEndpoint(c)
	moved.expectOnlyKept(t, c, n, "under "+up.version)

	sw.switchMode(ebpfServing)
	sw.to("svcproxy", "svcproxy in ebpf mode with the tc programs over "+up.version+"'s rules")
	expectEBPFServes(t, c, n, "after taking over from "+up.version)
	if left, err := c.RulesLeft(n); err != nil || left != "" {
		t.Errorf("after taking over from %s, rules ebpf mode with the tc programs does not keep: %s (%v)", up.version, left, err)
	}
	sw.load.stop(t)
}

// pinnedUpstream is the upstream kube-proxy of the pinned minor.
func pinnedUpstream(t *testing.T) upstreamKubeProxy {
	t.Helper()
	bin := buildBinaries(t).kubeProxy
	return upstreamKubeProxy{version: binVersion(bin), bin: bin}
}

// ebpfServing is what the switcher checks of svcproxy in ebpf mode: the
// counter of its failed syncs (either half's).
var ebpfServing = rollbackMode{name: "ebpf", failures: "svcproxy_ebpf_sync_failures_total"}

// switchMode changes the node's mode in its configuration file, for its
// next proxy, and what the switcher checks of that proxy.
func (s *switcher) switchMode(m rollbackMode) {
	s.t.Helper()
	if err := s.c.SwitchMode(s.n, m.name); err != nil {
		s.t.Fatal(err)
	}
	s.mode = m
}

// expectEBPFServes fails unless svcproxy's socket hooks and tc programs are
// attached on n: without them, the checks that they are gone would pass
// for nothing.
func expectEBPFServes(t *testing.T, c *F.Cluster, n *F.Node, when string) {
	t.Helper()
	attached, err := c.BPFAttached(n, tcInterface)
	switch {
	case err != nil:
		t.Fatalf("%s: %v", when, err)
	case !strings.Contains(attached, "cgroup's connect4") || !strings.Contains(attached, "tcx ingress"):
		t.Fatalf("%s: want the socket hooks and the tc programs attached, the kernel has: %q", when, attached)
	case !c.TCAttached(n, tcInterface):
		t.Fatalf("%s: no tc link pinned for %s", when, tcInterface)
	}
}

// ebpfGoneLimit is how long svcproxy leaving ebpf mode may take to remove
// it: the socket hooks go at once, the tc programs once the connections
// they translated are done, and after two minutes at the latest.
const ebpfGoneLimit = 150 * time.Second

// waitEBPFGone waits until nothing of ebpf mode is left on n (ebpfLeft),
// as an operator waits before swapping the image.
func waitEBPFGone(t *testing.T, c *F.Cluster, n *F.Node, when string) {
	t.Helper()
	t0 := time.Now()
	for {
		left, err := ebpfLeft(c, n)
		if err != nil {
			t.Fatalf("%s: %v", when, err)
		}
		if left == "" {
			t.Logf("%s: ebpf mode's programs and pins gone after %v", when, time.Since(t0).Round(time.Millisecond))
			return
		}
		if time.Since(t0) > ebpfGoneLimit {
			t.Fatalf("%s: after %v, still %s", when, ebpfGoneLimit, left)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// expectNoEBPF fails for anything of ebpf mode left on n (ebpfLeft).
func expectNoEBPF(t *testing.T, c *F.Cluster, n *F.Node, when string) {
	t.Helper()
	left, err := ebpfLeft(c, n)
	if err != nil {
		t.Fatalf("%s: %v", when, err)
	}
	if left != "" {
		t.Errorf("%s: %s", when, left)
	}
}

// ebpfLeft says what of ebpf mode n still has: programs attached to its
// cgroup or its interface, and anything under its pin directory. "" when
// nothing.
func ebpfLeft(c *F.Cluster, n *F.Node) (string, error) {
	var left []string
	attached, err := c.BPFAttached(n, tcInterface)
	if err != nil {
		return "", err
	}
	if attached != "" {
		left = append(left, "BPF programs attached: "+attached)
	}
	dir := c.EBPFPinDir(n)
	entries, err := os.ReadDir(dir)
	if err != nil {
		return "", err
	}
	var pins []string
	for _, e := range entries {
		if !bpffsOwn[e.Name()] {
			pins = append(pins, e.Name())
		}
	}
	if len(pins) > 0 {
		left = append(left, "pinned under "+filepath.Base(dir)+": "+strings.Join(pins, " "))
	}
	return strings.Join(left, "; "), nil
}

// bpffsOwn are what the kernel puts at the root of every bpffs mount (its
// preloaded iterators), which the node's pin directory is in these tests.
var bpffsOwn = map[string]bool{"maps.debug": true, "progs.debug": true}

// leftoversRemovedLine is what svcproxy logs once ebpf mode's leftovers are
// gone: the line migration.md has an operator wait for before swapping
// the image.
const leftoversRemovedLine = "Removed ebpf mode's leftovers"

// expectLeftoversRemovedLogged fails unless svcproxy's log on n says, soon,
// that ebpf mode's leftovers are removed: the line comes right after the
// unpinning, and the kernel may detach the programs first.
func expectLeftoversRemovedLogged(t *testing.T, c *F.Cluster, n *F.Node, when string) {
	t.Helper()
	path := filepath.Join(c.Work, "logs", "svcproxy-"+n.Name+".log")
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(string(data), leftoversRemovedLine) {
			return
		}
		if time.Now().After(deadline) {
			t.Errorf("%s: svcproxy's log has no %q, which an operator waits for before swapping the image", when, leftoversRemovedLine)
			return
		}
	}
}
