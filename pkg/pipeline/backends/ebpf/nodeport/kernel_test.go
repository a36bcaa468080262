package nodeport

import (
	"context"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"

	"github.com/svcproxy/svcproxy/pkg/pipeline/desired"
	"github.com/svcproxy/svcproxy/pkg/proxy"
	"github.com/svcproxy/svcproxy/pkg/testing/netnstest"
)

// rig is the throwaway topology of the kernel tests: node1 runs the tc
// programs on its fabric interface, pod-a is its pod, pod-b a pod of
// node2, and the client sits on the fabric, routing service addresses
// through node1. Nothing else serves node ports: no nftables rules
// exist, so whatever answers through one went through the programs.
type rig struct {
	node1, node2 *netnstest.Node
	fabric       *netnstest.NS // the bridge the nodes and the client are on
	podA, podB   *netnstest.Pod
	client       netnstest.Client
	clientIP     netip.Addr
	clientIP6    netip.Addr
	pins         string
}

func newRig(t *testing.T) *rig {
	t.Helper()
	netnstest.RequireKernel(t)
	lab := netnstest.New(t)
	cl, err := netnstest.NewCluster(lab, 2)
	must(t, err)
	r := &rig{node1: cl.Nodes[0], node2: cl.Nodes[1], fabric: cl.Fabric, pins: netnstest.MountThrowaway(t, "bpf")}
	r.podA, err = r.node1.AddPod("pod-a")
	must(t, err)
	r.podB, err = r.node2.AddPod("pod-b")
	must(t, err)
	ns, ids, err := cl.AddClient("client", r.node1, 1)
	must(t, err)
	r.client, r.clientIP, r.clientIP6 = netnstest.Client{NS: ns, Timeout: time.Second}, ids[0][0], ids[0][1]
	for _, pod := range []*netnstest.Pod{r.podA, r.podB} {
		for _, proto := range []proxy.Protocol{proxy.TCP, proxy.UDP} {
			_, err := pod.NS.Serve(pod.Name, proto, 8080)
			must(t, err)
		}
	}
	return r
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// proxier is a Proxier of node1 pinning under the rig's bpffs in dir.
func (r *rig) proxier(t *testing.T, dir string) *Proxier {
	p, err := New(Options{PinDir: filepath.Join(r.pins, dir), Interfaces: []string{"fab0"}})
	must(t, err)
	t.Cleanup(p.Close)
	return p
}

// sync syncs p inside node1's network namespace, where its interfaces are.
func (r *rig) sync(t *testing.T, p *Proxier, st *desired.State, mode proxy.SyncMode) {
	t.Helper()
	must(t, r.node1.NS.Do(func() error { return p.Sync(context.Background(), st, mode) }))
}

func (r *rig) ep(pod *netnstest.Pod) proxy.Endpoint { return ep(pod.IPv4, 8080) }

// ask sends n requests to node1's port and counts the answers by server;
// each answer's peer (the source the server saw) must be what want says
// for that server.
func (r *rig) ask(t *testing.T, proto proxy.Protocol, dst netip.AddrPort, n int, want map[string]func(netip.AddrPort) bool) map[string]int {
	t.Helper()
	seen := map[string]int{}
	for range n {
		a, err := r.client.Ask(proto, dst)
		if err != nil {
			t.Errorf("%s to %v: %v (%s)", proto, dst, err, netnstest.OutcomeOf(err))
			continue
		}
		seen[a.Server]++
		if ok := want[a.Server]; ok == nil || !ok(a.Peer) {
			t.Errorf("%s to %v: answered by %s, which saw the client as %v", proto, dst, a.Server, a.Peer)
		}
	}
	return seen
}

func (r *rig) outcome(proto proxy.Protocol, dst netip.AddrPort) netnstest.Outcome {
	_, err := r.client.Ask(proto, dst)
	return netnstest.OutcomeOf(err)
}

// keptSource: the server saw the client itself.
func (r *rig) keptSource(p netip.AddrPort) bool { return p.Addr() == r.clientIP }

// masqueraded: the server saw node1, from a masquerade port.
func (r *rig) masqueraded(p netip.AddrPort) bool {
	return p.Addr() == r.node1.IPv4 && MasqueradePort(p.Port())
}

// TestKernelNodePort: TCP and UDP to node1's node ports reach the local
// endpoint with the client's address (no nftables rules here masquerade
// it, nor do the programs mark it for rules: TestKernelLocalFlowsUnmarked,
// and internal/backends' TestKernelEBPFModeTC sees both together) and the
// remote one masqueraded, and
// the client gets its answers from the node port (its sockets are
// connected to it: an untranslated reply would not reach them).
// externalTrafficPolicy Local keeps the client's address; a frontend
// without endpoints is refused (RST, ICMP) or dropped as desired says.
func TestKernelNodePort(t *testing.T) {
	r := newRig(t)
	a, b := r.ep(r.podA), r.ep(r.podB)
	local := port("local", proxy.TCP, 30082, a)
	local.ExternalLocal = true
	drop := port("drop", proxy.TCP, 30085)
	drop.ExternalLocal = true
	drop.External.Empty = desired.Drop
	rejectTCP, rejectUDP := port("reject", proxy.TCP, 0), port("reject", proxy.UDP, 0)
	extIP := netip.MustParseAddr("198.18.100.1")
	rejectTCP.ExternalIPs, rejectUDP.ExternalIPs = []netip.Addr{extIP}, []netip.Addr{extIP}
	st := stateOf(r.node1.IPv4, port("web", proxy.TCP, 30080, a, b), port("dns", proxy.UDP, 30081, a, b),
		local, drop, rejectTCP, rejectUDP)
	p := r.proxier(t, "np")
	r.sync(t, p, st, proxy.RecoverySync)

	both := map[string]func(netip.AddrPort) bool{"pod-a": r.keptSource, "pod-b": r.masqueraded}
	for _, tc := range []struct {
		proto proxy.Protocol
		port  uint16
	}{{proxy.TCP, 30080}, {proxy.UDP, 30081}} {
		dst := netip.AddrPortFrom(r.node1.IPv4, tc.port)
		seen := r.ask(t, tc.proto, dst, 24, both)
		t.Logf("24 %s requests to %v: %v", tc.proto, dst, seen)
		if seen["pod-a"] == 0 || seen["pod-b"] == 0 {
			t.Errorf("%s to %v reached %v, want the local and the remote endpoint", tc.proto, dst, seen)
		}
	}
	dst := netip.AddrPortFrom(r.node1.IPv4, 30082)
	if seen := r.ask(t, proxy.TCP, dst, 6, map[string]func(netip.AddrPort) bool{"pod-a": r.keptSource}); seen["pod-a"] != 6 {
		t.Errorf("externalTrafficPolicy Local: %v, want pod-a only", seen)
	}
	// Without the programs, the external IP's packets would end in the
	// node's sink route (a timeout) and the node port at the node's stack
	// (refused): the outcomes below are the programs'.
	for _, tc := range []struct {
		proto proxy.Protocol
		dst   netip.AddrPort
		want  netnstest.Outcome
	}{
		{proxy.TCP, netip.AddrPortFrom(extIP, 80), netnstest.Refused},
		{proxy.UDP, netip.AddrPortFrom(extIP, 80), netnstest.Refused},
		{proxy.TCP, netip.AddrPortFrom(r.node1.IPv4, 30085), netnstest.Timeout},
	} {
		if got := r.outcome(tc.proto, tc.dst); got != tc.want {
			t.Errorf("%s to %v without endpoints: %s, want %s", tc.proto, tc.dst, got, tc.want)
		}
	}
}

// TestKernelRestartAndChange: a restarted Proxier adopts the pins and
// writes nothing for an unchanged State, a connection established before
// the restart still works after it, an endpoint change applies, and
// Cleanup leaves the node port to the node's stack.
func TestKernelRestartAndChange(t *testing.T) {
	r := newRig(t)
	a, b := r.ep(r.podA), r.ep(r.podB)
	st := stateOf(r.node1.IPv4, port("web", proxy.TCP, 30080, a, b))
	dst := netip.AddrPortFrom(r.node1.IPv4, 30080)
	first := r.proxier(t, "np")
	r.sync(t, first, st, proxy.RecoverySync)
	if first.Writes() == 0 {
		t.Fatal("the first sync wrote nothing")
	}
	conns := map[string]*netnstest.Conn{}
	for i := 0; i < 40 && len(conns) < 2; i++ {
		c, err := r.client.DialTCP(dst)
		must(t, err)
		ans, err := c.Ask()
		must(t, err)
		if conns[ans.Server] == nil {
			conns[ans.Server] = c
			defer c.Close()
		} else {
			c.Close()
		}
	}
	if len(conns) != 2 {
		t.Fatalf("40 connections reached %v, want both endpoints", conns)
	}
	first.Close()

	second := r.proxier(t, "np")
	r.sync(t, second, st, proxy.RecoverySync)
	if n := second.Writes(); n != 0 {
		t.Errorf("the restarted Proxier wrote %d entries for an unchanged State, want 0", n)
	}
	for name, c := range conns {
		if ans, err := c.Ask(); err != nil || ans.Server != name {
			t.Errorf("the connection to %s across the restart: %v, %v", name, ans, err)
		}
	}

	// The canary: a map's pin and a link's gone; a recovery sync pins
	// again, and the new link attaches before the old one goes.
	if second.CanaryMissing() {
		t.Error("CanaryMissing with every pin in place")
	}
	for _, pin := range []string{mapServices, "link_np_egress_fab0"} {
		must(t, os.Remove(filepath.Join(r.pins, "np", pin)))
	}
	if !second.CanaryMissing() {
		t.Error("CanaryMissing is false with two pins gone")
	}
	r.sync(t, second, st, proxy.RecoverySync)
	if second.CanaryMissing() {
		t.Error("CanaryMissing after the recovery sync")
	}
	r.ask(t, proxy.TCP, dst, 8, map[string]func(netip.AddrPort) bool{"pod-a": r.keptSource, "pod-b": r.masqueraded})

	r.sync(t, second, stateOf(r.node1.IPv4, port("web", proxy.TCP, 30080, a)), proxy.FullSync)
	if seen := r.ask(t, proxy.TCP, dst, 8, map[string]func(netip.AddrPort) bool{"pod-a": r.keptSource}); seen["pod-a"] != 8 {
		t.Errorf("after pod-b left: %v, want pod-a only", seen)
	}
	must(t, second.Cleanup())
	if got := r.outcome(proxy.TCP, dst); got != netnstest.Refused {
		t.Errorf("after Cleanup the node port gave %s, want the node's own refusal", got)
	}
}

// TestKernelDroppedInterface: a start with an interface no longer listed
// detaches the programs from it and forgets it as a node interface, and
// keeps serving on the ones still listed.
func TestKernelDroppedInterface(t *testing.T) {
	r := newRig(t)
	st := stateOf(r.node1.IPv4, port("web", proxy.TCP, 30080, r.ep(r.podA)))
	dir := filepath.Join(r.pins, "np")
	both, err := New(Options{PinDir: dir, Interfaces: []string{"fab0", "veth0"}})
	must(t, err)
	r.sync(t, both, st, proxy.RecoverySync)
	both.Close()
	if n := r.attachedTCX(t, "veth0"); n != 2 {
		t.Fatalf("with veth0 listed: %d programs on it, want 2", n)
	}

	fab := r.proxier(t, "np")
	r.sync(t, fab, st, proxy.RecoverySync)
	if n := r.attachedTCX(t, "veth0"); n != 0 {
		t.Errorf("veth0 no longer listed: %d programs still on it, want 0", n)
	}
	if left, _ := filepath.Glob(filepath.Join(dir, "link_*_veth0")); len(left) != 0 {
		t.Errorf("pins left for veth0: %v", left)
	}
	var devs []uint32
	var idx, val uint32
	it := fab.kernel.coll.Maps[mapDevices].Iterate()
	for it.Next(&idx, &val) {
		devs = append(devs, idx)
	}
	must(t, it.Err())
	if len(devs) != 1 {
		t.Errorf("node interfaces %v, want fab0's alone", devs)
	}
	dst := netip.AddrPortFrom(r.node1.IPv4, 30080)
	if seen := r.ask(t, proxy.TCP, dst, 4, map[string]func(netip.AddrPort) bool{"pod-a": r.keptSource}); seen["pod-a"] != 4 {
		t.Errorf("through fab0 after the restart: %v, want pod-a 4 times", seen)
	}
}

// TestKernelForeignLinkDetached: a start detaches a link another version
// pinned in the directory by a name this one does not use, whatever its
// form (its programs would go on running beside this version's), and
// removes it, and serves through its own.
func TestKernelForeignLinkDetached(t *testing.T) {
	r := newRig(t)
	st := stateOf(r.node1.IPv4, port("web", proxy.TCP, 30080, r.ep(r.podA)))
	first := r.proxier(t, "np")
	r.sync(t, first, st, proxy.RecoverySync)
	foreign := filepath.Join(r.pins, "np", "tcx_np_ingress_v9_fab0")
	must(t, r.node1.NS.Do(func() error {
		dev, err := net.InterfaceByName("fab0")
		if err != nil {
			return err
		}
		// A hook takes a program once: another program stands for the
		// other version's.
		lk, err := link.AttachTCX(link.TCXOptions{Interface: dev.Index, Program: first.kernel.coll.Programs["np_egress"],
			Attach: ebpf.AttachTCXIngress})
		if err != nil {
			return err
		}
		defer lk.Close()
		return lk.Pin(foreign)
	}))
	first.Close()
	if n := r.attachedTCX(t, "fab0"); n != 3 {
		t.Fatalf("with another version's link pinned: %d programs on fab0, want 3", n)
	}

	second := r.proxier(t, "np")
	r.sync(t, second, st, proxy.RecoverySync)
	if n := r.attachedTCX(t, "fab0"); n != 2 {
		t.Errorf("after a start: %d programs on fab0, want its own 2", n)
	}
	if _, err := os.Stat(foreign); !os.IsNotExist(err) {
		t.Errorf("the other version's link pin is still there (%v)", err)
	}
	dst := netip.AddrPortFrom(r.node1.IPv4, 30080)
	if seen := r.ask(t, proxy.TCP, dst, 4, map[string]func(netip.AddrPort) bool{"pod-a": r.keptSource}); seen["pod-a"] != 4 {
		t.Errorf("through fab0 after the start: %v, want pod-a 4 times", seen)
	}
}

// attachedTCX counts the programs at iface's TCX hooks in node1.
func (r *rig) attachedTCX(t *testing.T, iface string) int {
	t.Helper()
	n, err := r.node1.NS.TCXPrograms(iface)
	must(t, err)
	return n
}

// TestKernelPinDirAtBPFFSRoot: pinned at the root of a bpffs mount, where
// the kernel keeps files of its own (maps.debug, progs.debug, on kernels
// built with preloaded iterators), a load leaves those alone: removing
// them fails, and a load that tried could not start.
func TestKernelPinDirAtBPFFSRoot(t *testing.T) {
	r := newRig(t)
	kernelFiles := map[string]bool{}
	for _, name := range []string{"maps.debug", "progs.debug"} {
		if _, err := os.Stat(filepath.Join(r.pins, name)); err == nil {
			kernelFiles[name] = true
		}
	}
	t.Logf("the kernel's own files at the bpffs root: %v", kernelFiles)
	p := r.proxier(t, "")
	r.sync(t, p, stateOf(r.node1.IPv4, port("web", proxy.TCP, 30080, r.ep(r.podA))), proxy.RecoverySync)
	for name := range kernelFiles {
		if _, err := os.Stat(filepath.Join(r.pins, name)); err != nil {
			t.Errorf("the kernel's %s after the load: %v", name, err)
		}
	}
	dst := netip.AddrPortFrom(r.node1.IPv4, 30080)
	if seen := r.ask(t, proxy.TCP, dst, 2, map[string]func(netip.AddrPort) bool{"pod-a": r.keptSource}); seen["pod-a"] != 2 {
		t.Errorf("through fab0: %v, want pod-a twice", seen)
	}
}

// TestKernelEntriesAndFrontends: what Entries and Frontends read of the
// pinned tables is what the programs did: a frontend per node port, and a
// client's connection as its two directions (the forward one matching the
// client's packets to the node port, rewritten toward the endpoint).
func TestKernelEntriesAndFrontends(t *testing.T) {
	r := newRig(t)
	p := r.proxier(t, "np")
	dir := filepath.Join(r.pins, "np")
	if n, err := Frontends(dir); err != nil || n != 0 {
		t.Fatalf("before a load: %d frontends (%v), want 0", n, err)
	}
	r.sync(t, p, stateOf(r.node1.IPv4, port("web", proxy.TCP, 30080, r.ep(r.podA))), proxy.RecoverySync)
	if n, err := Frontends(dir); err != nil || n == 0 {
		t.Fatalf("after a sync: %d frontends (%v), want some", n, err)
	}
	dst := netip.AddrPortFrom(r.node1.IPv4, 30080)
	if seen := r.ask(t, proxy.TCP, dst, 1, map[string]func(netip.AddrPort) bool{"pod-a": r.keptSource}); seen["pod-a"] != 1 {
		t.Fatalf("through fab0: %v, want pod-a once", seen)
	}
	entries, err := Entries(dir)
	must(t, err)
	var fwd, reply int
	for _, e := range entries {
		switch {
		case !e.Reply && e.Dst == dst && e.Src.Addr() == r.clientIP && e.ToDst == netip.AddrPortFrom(r.podA.IPv4, 8080):
			fwd++
		case e.Reply && e.Src == netip.AddrPortFrom(r.podA.IPv4, 8080) && e.ToSrc == dst:
			reply++
		}
		if e.Seen == 0 {
			t.Errorf("entry %+v: no last-seen time", e)
		}
	}
	if fwd != 1 || reply != 1 {
		t.Errorf("the connection's entries: %d forward, %d reply, want 1 and 1; all: %+v", fwd, reply, entries)
	}
}

// TestKernelNoWindow: a client outside the node connects to a node port
// over and over while the endpoint set changes under it, grows and
// shrinks; every endpoint serves throughout, so every connection must be
// answered at once (a SYN the programs dropped would take the kernel's
// one-second retransmission, past the client's timeout).
func TestKernelNoWindow(t *testing.T) {
	r := newRig(t)
	for _, pod := range []*netnstest.Pod{r.podA, r.podB} {
		_, err := pod.NS.Serve(pod.Name, proxy.TCP, 8081)
		must(t, err)
	}
	a0, a1 := ep(r.podA.IPv4, 8080), ep(r.podA.IPv4, 8081)
	b0, b1 := ep(r.podB.IPv4, 8080), ep(r.podB.IPv4, 8081)
	sets := [][]proxy.Endpoint{{a0, b0}, {b0}, {a0, a1, b1}, {a0}, {a0, a1, b0, b1}, {b1}, {a1, b0}}
	p := r.proxier(t, "np")
	r.sync(t, p, stateOf(r.node1.IPv4, port("web", proxy.TCP, 30080, a0)), proxy.RecoverySync)

	dst := netip.AddrPortFrom(r.node1.IPv4, 30080)
	client := r.client
	client.Timeout = 800 * time.Millisecond
	stop := make(chan struct{})
	done := make(chan [2]int)
	go func() {
		asked, failed := 0, 0
		for {
			select {
			case <-stop:
				done <- [2]int{asked, failed}
				return
			default:
			}
			asked++
			if _, err := client.Ask(proxy.TCP, dst); err != nil {
				failed++
				t.Logf("connection %d: %v", asked, err)
			}
		}
	}()
	const syncs = 1500
	for i := range syncs {
		r.sync(t, p, stateOf(r.node1.IPv4, port("web", proxy.TCP, 30080, sets[i%len(sets)]...)), proxy.PartialSync)
		time.Sleep(500 * time.Microsecond)
	}
	close(stop)
	got := <-done
	t.Logf("%d connections during %d syncs, %d failed", got[0], syncs, got[1])
	if got[0] < 100 || got[1] != 0 {
		t.Errorf("%d of %d connections failed while the endpoints changed (want none of at least 100)", got[1], got[0])
	}
}
