package contract

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	F "github.com/svcproxy/svcproxy/test/e2e/framework"
)

// TestEBPFDirectSwapRecovery swaps one node straight from svcproxy's ebpf
// mode, with the tc programs, to upstream kube-proxy in nftables mode (the
// image and the ConfigMap's mode changed at once), which migration.md says
// not to do, and checks what it says of it: upstream runs, its own
// `--cleanup` included, without touching what ebpf mode pinned, so the
// socket hooks and tc programs go on sending new connections to an
// endpoint removed afterwards; removing the pin directory takes them off,
// and from then on upstream alone decides. The first half is also the
// control of TestEBPFRollback's checks: they see the programs left
// behind.
func TestEBPFDirectSwapRecovery(t *testing.T) {
	c, n, moved, sw := ebpfNodeServing(t, "before the swap")

	sw.switchMode(nftablesRollback)
	sw.to("upstream", sw.up.version+" straight after ebpf mode")
	sw.stop()
	if out, err := c.Exec(n, sw.up.bin, "--cleanup"); err != nil {
		t.Fatalf("kube-proxy --cleanup: %v: %s", err, out)
	}
	sw.start("upstream", sw.up.version+" after its --cleanup")
	expectEBPFServes(t, c, n, "after a direct swap and kube-proxy --cleanup")
	moved.removeEndpoint(c)
	if err := moved.removedStillReached(c, n); err != nil {
		t.Errorf("after a direct swap, want the programs left behind to reach the removed endpoint: %v", err)
	}

	removePins(t, c.EBPFPinDir(n))
	// The kernel detaches a link once its pin's inode is freed, after an RCU
	// grace period: soon, not at once.
	waitEBPFGone(t, c, n, "after removing the pin directory")
	moved.expectOnlyKept(t, c, n, "after removing the pin directory")
}

// removePins removes everything pinned under dir, as `rm -r` of the pin
// directory does (here dir is a bpffs mount's root, which stays).
func removePins(t *testing.T, dir string) {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if bpffsOwn[e.Name()] {
			continue
		}
		if err := os.RemoveAll(filepath.Join(dir, e.Name())); err != nil {
			t.Fatal(err)
		}
	}
}

// twoEndpointService is a NodePort Service served by two pods, one of
// which a test takes out of its endpoints. It is asked at its cluster IP
// from a pod (what the socket hooks translate) and at its node port from
// outside (what the tc programs translate).
type twoEndpointService struct {
	svc        *corev1.Service
	kept, gone *F.Pod
}

func createTwoEndpointService(t *testing.T, c *F.Cluster, n *F.Node) *twoEndpointService {
	t.Helper()
	svc := c.CreateService(F.NewService("moved", corev1.ServiceTypeNodePort))
	s := &twoEndpointService{svc: svc, kept: c.AddPod(n, "pmoved-kept"), gone: c.AddPod(n, "pmoved-gone")}
	c.SetEndpoints(svc, F.EP{Pod: s.kept}, F.EP{Pod: s.gone})
	return s
}

// frontend is where a client asks a Service, from.
type frontend struct {
	from   string
	target F.Target
}

func (s *twoEndpointService) frontends(n *F.Node) []frontend {
	return []frontend{
		{"cli1", F.TCP(s.svc.Spec.ClusterIP, 80)},
		{"ext", F.TCP(n.IP, s.svc.Spec.Ports[0].NodePort)},
	}
}

// removedRound is how many connections of one round must all reach the
// endpoint kept: a proxy that still balanced over both would send them
// all there with a chance of one in 2^20.
const removedRound = 20

// expectBothReached fails unless both endpoints answer at every frontend.
func (s *twoEndpointService) expectBothReached(t *testing.T, c *F.Cluster, n *F.Node, when string) {
	t.Helper()
	for _, f := range s.frontends(n) {
		if err := c.Eventually(f.from, f.target, removedRound, 10*time.Second, F.AllOf(s.kept.Name, s.gone.Name)); err != nil {
			t.Errorf("%s: %v", when, err)
		}
	}
}

// removeEndpoint takes s.gone out of the Service's endpoints; its pod
// goes on serving.
func (s *twoEndpointService) removeEndpoint(c *F.Cluster) {
	c.SetEndpoints(s.svc, F.EP{Pod: s.kept})
}

// expectOnlyKept fails unless, soon, every connection at every frontend
// reaches s.kept alone.
func (s *twoEndpointService) expectOnlyKept(t *testing.T, c *F.Cluster, n *F.Node, when string) {
	t.Helper()
	for _, f := range s.frontends(n) {
		if err := c.Eventually(f.from, f.target, removedRound, 10*time.Second, F.OnlyBy(s.kept.Name)); err != nil {
			t.Errorf("%s: an endpoint removed is still reached: %v", when, err)
		}
	}
}

// removedStillReached returns nil when, past the time upstream takes to
// program the removal, the removed endpoint still answers at every
// frontend.
func (s *twoEndpointService) removedStillReached(c *F.Cluster, n *F.Node) error {
	time.Sleep(newServiceLimit(true))
	for _, f := range s.frontends(n) {
		rs := c.Ask(f.from, f.target, removedRound, time.Second)
		if !slices.ContainsFunc(rs, func(r F.Result) bool { return r.OK && r.Pod == s.gone.Name }) {
			return fmt.Errorf("from %s to %s: %v", f.from, f.target, rs)
		}
	}
	return nil
}

// TestEBPFRollbackSwapDuringDrain swaps the image while svcproxy's first
// rollback step still waits for a flow the tc programs translated (a UDP
// stream from outside to a node port, never quiet), which migration.md
// says to clean up after: by then the socket hooks are gone and the tc
// programs take no new connection, so upstream alone decides for new ones
// (an endpoint removed afterwards is not reached) while the programs stay
// attached, holding that flow, until the pin directory is removed.
func TestEBPFRollbackSwapDuringDrain(t *testing.T) {
	c, n, moved, sw := ebpfNodeServing(t, "before the rollback")
	held := c.StartLoad("ext", F.UDP(n.IP, moved.svc.Spec.Ports[1].NodePort), loadInterval, true)

	sw.switchMode(nftablesRollback)
	sw.to("svcproxy", "svcproxy in nftables mode (rollback step 1)")
	waitDraining(t, c, n)
	sw.to("upstream", sw.up.version+" swapped in during the drain")
	if attached, err := c.BPFAttached(n, tcInterface); err != nil || !strings.Contains(attached, "tcx ingress") {
		t.Fatalf("want the tc programs still attached, holding the UDP flow: %q (%v)", attached, err)
	}
	moved.removeEndpoint(c)
	moved.expectOnlyKept(t, c, n, "under "+sw.up.version+", the tc programs still attached")
	if rs := held.Snapshot(); len(rs) == 0 || len(F.Failures(rs)) > 0 {
		t.Errorf("the UDP stream the tc programs hold: %d of %d requests failed before the pins were removed, first: %v",
			len(F.Failures(rs)), len(rs), first(resultStrings(F.Failures(rs)), 3))
	}

	removePins(t, c.EBPFPinDir(n))
	waitEBPFGone(t, c, n, "after removing the pin directory")
	moved.expectOnlyKept(t, c, n, "after removing the pin directory")
}

// waitDraining waits until svcproxy leaving ebpf mode has taken the socket
// hooks off and is waiting for the tc programs' flows.
func waitDraining(t *testing.T, c *F.Cluster, n *F.Node) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		attached, err := c.BPFAttached(n, tcInterface)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(attached, "cgroup") && strings.Contains(attached, "tcx ingress") {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("after 30 s, want the tc programs alone attached, draining: %q", attached)
		}
	}
}

func resultStrings(rs []F.Result) []string {
	out := make([]string, len(rs))
	for i, r := range rs {
		out[i] = r.String()
	}
	return out
}

// ebpfNodeServing starts a one-node cluster whose svcproxy serves in ebpf
// mode with the tc programs, with a two-endpoint Service both of whose
// endpoints it reaches (checked, and said to be so "when"), and the
// switcher that will take it to the pinned upstream.
func ebpfNodeServing(t *testing.T, when string) (*F.Cluster, *F.Node, *twoEndpointService, *switcher) {
	up := pinnedUpstream(t)
	c := F.New(t, F.Options{Mode: "ebpf", TCInterfaces: []string{tcInterface}, Nodes: 1, NoProxy: true,
		SyncPeriod: 5 * time.Second})
	n := c.Nodes[0]
	moved := createTwoEndpointService(t, c, n)
	sw := &switcher{t: t, c: c, n: n, mode: ebpfServing, up: up}
	sw.to("svcproxy", "svcproxy in ebpf mode with the tc programs")
	expectEBPFServes(t, c, n, when)
	moved.expectBothReached(t, c, n, when)
	return c, n, moved, sw
}
