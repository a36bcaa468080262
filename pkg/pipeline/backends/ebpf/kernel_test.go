package ebpf

import (
	"context"
	"errors"
	"maps"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/cilium/ebpf"

	"github.com/svcproxy/svcproxy/pkg/pipeline/desired"
	"github.com/svcproxy/svcproxy/pkg/proxy"
	"github.com/svcproxy/svcproxy/pkg/testing/netnstest"
)

var (
	vip4 = netip.MustParseAddr("172.30.0.10")
	vip6 = netip.MustParseAddr("fd00:30::10")
)

// proxier returns a Proxier of the rig whose pins are removed at the end
// of the test, and checks that Cleanup left nothing pinned.
func (r *rig) proxier(t testing.TB, family proxy.IPFamily) *Proxier {
	p, err := New(family, Options{PinDir: r.pins, Cgroup: r.cgroup})
	must(t, err)
	t.Cleanup(func() {
		if err := p.Cleanup(context.Background()); err != nil {
			t.Errorf("Cleanup: %v", err)
		}
		if _, err := os.Stat(p.dir); !os.IsNotExist(err) {
			t.Errorf("Cleanup left %s (stat: %v)", p.dir, err)
		}
	})
	return p
}

func sync(t testing.TB, p *Proxier, st *desired.State, mode proxy.SyncMode) {
	t.Helper()
	must(t, p.Sync(context.Background(), st, mode))
}

// servers counts the answers by server; a failed try fails the test, and
// so does an answer whose peer is not want.
func servers(t *testing.T, replies []reply, want netip.AddrPort) map[string]int {
	t.Helper()
	seen := map[string]int{}
	for _, r := range replies {
		if r.Err != "" {
			t.Fatalf("client failed: %s", r.Err)
		}
		if r.Peer != want {
			t.Errorf("peer %s, want the service address %s", r.Peer, want)
		}
		seen[r.Server]++
	}
	return seen
}

func TestKernelTCPClusterIP(t *testing.T) {
	r := newRig(t)
	r.serve(t, proxy.TCP, 8081, "ep1", "ep2", "ep3")
	p := r.proxier(t, proxy.IPv4)
	front := netip.AddrPortFrom(vip4, 80)
	sync(t, p, stateOf(proxy.IPv4, svc("web", proxy.TCP, vip4, 80, eps(srvIP4, 8081, 8082, 8083)...)), proxy.RecoverySync)

	seen := servers(t, r.ask(t, "tcp", front, 60), front)
	t.Logf("60 connections to %s: %v", front, seen)
	if len(seen) != 3 {
		t.Errorf("connections reached %v, want all of ep1, ep2, ep3", seen)
	}
	if got := r.ask(t, "tcp", netip.AddrPortFrom(vip4, 81), 1); got[0].Err != "refused" {
		t.Errorf("a port the Service lacks answered %+v, want connection refused", got[0])
	}

	sync(t, p, changed(stateOf(proxy.IPv4, svc("web", proxy.TCP, vip4, 80, eps(srvIP4, 8083)...))), proxy.PartialSync)
	if seen := servers(t, r.ask(t, "tcp", front, 10), front); seen["ep3"] != 10 {
		t.Errorf("after the endpoint change, connections reached %v, want only ep3", seen)
	}

	sync(t, p, changed(stateOf(proxy.IPv4, svc("web", proxy.TCP, vip4, 80))), proxy.PartialSync)
	if got := r.ask(t, "tcp", front, 1); got[0].Err != "refused" {
		t.Errorf("a service without endpoints answered %+v, want connection refused", got[0])
	}
}

func TestKernelUDPReplyFromService(t *testing.T) {
	r := newRig(t)
	r.serve(t, proxy.UDP, 5301, "dns1", "dns2")
	p := r.proxier(t, proxy.IPv4)
	front := netip.AddrPortFrom(vip4, 53)
	sync(t, p, stateOf(proxy.IPv4, svc("dns", proxy.UDP, vip4, 53, eps(srvIP4, 5301, 5302)...)), proxy.RecoverySync)

	// servers checks that every reply came from the service address.
	seen := servers(t, r.ask(t, "udp", front, 20), front)
	t.Logf("20 datagrams to %s: %v", front, seen)
	if seen["dns1"]+seen["dns2"] != 20 {
		t.Errorf("datagrams reached %v, want only dns1 and dns2", seen)
	}
}

func TestKernelIPv6(t *testing.T) {
	r := newRig(t)
	r.serve(t, proxy.TCP, 8081, "ep1", "ep2")
	r.serve(t, proxy.UDP, 5301, "dns1")
	p := r.proxier(t, proxy.IPv6)
	web, dns := netip.AddrPortFrom(vip6, 80), netip.AddrPortFrom(vip6, 53)
	sync(t, p, stateOf(proxy.IPv6,
		svc("web", proxy.TCP, vip6, 80, eps(srvIP6, 8081, 8082)...),
		svc("dns", proxy.UDP, vip6, 53, eps(srvIP6, 5301)...)), proxy.RecoverySync)

	if seen := servers(t, r.ask(t, "tcp", web, 20), web); len(seen) != 2 {
		t.Errorf("connections reached %v, want ep1 and ep2", seen)
	}
	if seen := servers(t, r.ask(t, "udp", dns, 3), dns); seen["dns1"] != 3 {
		t.Errorf("datagrams reached %v, want dns1", seen)
	}
}

func TestKernelRestartAdopts(t *testing.T) {
	r := newRig(t)
	r.serve(t, proxy.TCP, 8081, "ep1", "ep2")
	front := netip.AddrPortFrom(vip4, 80)
	st := stateOf(proxy.IPv4, svc("web", proxy.TCP, vip4, 80, eps(srvIP4, 8081, 8082)...))
	first := r.proxier(t, proxy.IPv4)
	sync(t, first, st, proxy.RecoverySync)
	if first.Writes() == 0 {
		t.Fatal("the first sync wrote nothing")
	}
	first.Close()
	// The pins keep the programs attached while no svcproxy runs.
	servers(t, r.ask(t, "tcp", front, 4), front)

	second := r.proxier(t, proxy.IPv4)
	sync(t, second, st, proxy.RecoverySync)
	if n := second.Writes(); n != 0 {
		t.Errorf("a restart with the same State wrote %d map entries, want 0", n)
	}
	servers(t, r.ask(t, "tcp", front, 4), front)

	sync(t, second, changed(stateOf(proxy.IPv4, svc("web", proxy.TCP, vip4, 80, eps(srvIP4, 8082)...))), proxy.PartialSync)
	// The count flips to 1 and slot 0 now holds ep2; slot 1 goes.
	if n := second.Writes(); n != 3 {
		t.Errorf("dropping one of two endpoints wrote %d entries, want 3", n)
	}
	if seen := servers(t, r.ask(t, "tcp", front, 6), front); seen["ep2"] != 6 {
		t.Errorf("after the change, connections reached %v, want only ep2", seen)
	}

	must(t, second.Cleanup(context.Background()))
	// Without the programs the cluster IP is just an unrouted address.
	if got := r.ask(t, "tcp", front, 1); got[0].Server != "" {
		t.Errorf("after Cleanup a connection still reached %s", got[0].Server)
	}
}

func TestKernelAffinityAndDrop(t *testing.T) {
	r := newRig(t)
	r.serve(t, proxy.TCP, 8080, "ep0", "ep1", "ep2", "ep3")
	p := r.proxier(t, proxy.IPv4)
	sticky := svc("sticky", proxy.TCP, vip4, 80, eps(srvIP4, 8081, 8082, 8083)...)
	sticky.AffinitySeconds = 60
	dropped := svc("local", proxy.TCP, vip4, 81)
	dropped.Internal.Empty = desired.Drop
	sync(t, p, stateOf(proxy.IPv4, sticky, dropped), proxy.RecoverySync)

	front := netip.AddrPortFrom(vip4, 80)
	// Each client process is a new socket, but the same client (the
	// network namespace) for affinity.
	first := servers(t, r.ask(t, "tcp", front, 1), front)
	for k := range first {
		if seen := servers(t, r.ask(t, "tcp", front, 20), front); seen[k] != 20 {
			t.Errorf("with ClientIP affinity, connections reached %v, want only %s", seen, k)
		}
		// A new endpoint sorts first; the client keeps its endpoint.
		sticky.Internal.Endpoints = eps(srvIP4, 8080, 8081, 8082, 8083)
		sync(t, p, changed(stateOf(proxy.IPv4, sticky, dropped)), proxy.PartialSync)
		if seen := servers(t, r.ask(t, "tcp", front, 20), front); seen[k] != 20 {
			t.Errorf("after an endpoint was added, connections reached %v, want only %s", seen, k)
		}
	}
	if got := r.ask(t, "tcp", netip.AddrPortFrom(vip4, 81), 1); got[0].Err != "timeout" {
		t.Errorf("a service whose Local policy leaves no endpoint answered %+v, want a timeout", got[0])
	}
}

// TestKernelVerifier loads every program on this kernel and reports how
// many instructions the verifier processed for each.
func TestKernelVerifier(t *testing.T) {
	netnstest.RequireKernel(t)
	spec, err := loadSock()
	must(t, err)
	for _, name := range []string{mapServices, mapBackends, mapRevNAT, mapAffinity, mapDoomed} {
		spec.Maps[name].MaxEntries = minCapacity
	}
	// The socket iterator has a floor of its own: below it, it must fail
	// as not supported, which is how svcproxy tells.
	delete(spec.Programs, progUDPSockets)
	coll, err := ebpf.NewCollection(spec)
	must(t, err)
	defer coll.Close()
	progs := coll.Programs
	it, err := loadIterator(coll.Maps[mapRevNAT])
	switch {
	case err == nil:
		defer it.close()
		progs[progUDPSockets] = it.prog
	case !socketDestroyKernel(t) && errors.Is(err, ebpf.ErrNotSupported):
		t.Logf("%s: not supported on this kernel, as expected below 6.5: %v", progUDPSockets, err)
	default:
		t.Errorf("loading %s: %v", progUDPSockets, err)
	}
	for _, name := range slices.Sorted(maps.Keys(progs)) {
		info, err := progs[name].Info()
		must(t, err)
		n, ok := info.VerifiedInstructions()
		if !ok || n == 0 {
			t.Errorf("%s: no verified instruction count (%d, %v)", name, n, ok)
		}
		t.Logf("%-13s %5d instructions verified", name, n)
	}
}

// TestKernelNodeRoute: sockets of the node's network namespace take
// desired's route from the node. With externalTrafficPolicy Local and no
// detector, a pod's traffic to an external IP goes to the local endpoints
// only, the node's to every endpoint.
func TestKernelNodeRoute(t *testing.T) {
	r := newRig(t)
	r.serve(t, proxy.TCP, 8081, "local", "remote")
	sp := svc("etp", proxy.TCP, vip4, 80, eps(srvIP4, 8081, 8082)...)
	ext := netip.MustParseAddr("198.18.9.1")
	sp.ExternalIPs = []netip.Addr{ext}
	sp.ExternalLocal = true
	sp.External = desired.Dispatch{Endpoints: eps(srvIP4, 8081)}
	st := stateOf(proxy.IPv4, sp)
	front := netip.AddrPortFrom(ext, 80)

	asPod := r.proxier(t, proxy.IPv4)
	sync(t, asPod, st, proxy.RecoverySync)
	if seen := servers(t, r.ask(t, "tcp", front, 20), front); seen["local"] != 20 {
		t.Errorf("from a pod, connections reached %v, want only the local endpoint", seen)
	}
	must(t, asPod.Cleanup(context.Background()))

	var cookie uint64
	must(t, r.cli.Do(func() (err error) { cookie, err = ownNetns(); return err }))
	asNode, err := New(proxy.IPv4, Options{PinDir: r.pins, Cgroup: r.cgroup, NodeNetns: cookie})
	must(t, err)
	t.Cleanup(func() { must(t, asNode.Cleanup(context.Background())) })
	sync(t, asNode, st, proxy.RecoverySync)
	if seen := servers(t, r.ask(t, "tcp", front, 30), front); len(seen) != 2 {
		t.Errorf("from the node, connections reached %v, want both endpoints", seen)
	}
}

// TestKernelGrow: a State that outgrows the maps moves the programs to
// larger maps, filled first; the pins follow, and a restart adopts them.
func TestKernelGrow(t *testing.T) {
	r := newRig(t)
	ports := r.serveTen(t)
	front := netip.AddrPortFrom(vip4, 80)
	p := r.proxier(t, proxy.IPv4)
	p.minCapacity = 4
	sync(t, p, stateOf(proxy.IPv4, svc("web", proxy.TCP, vip4, 80, eps(srvIP4, 8080)...)), proxy.RecoverySync)
	if c := p.kernel.mapOf(mapBackends).MaxEntries(); c != 4 {
		t.Fatalf("the backend map holds %d entries, want 4", c)
	}
	servers(t, r.ask(t, "tcp", front, 2), front)

	big := changed(stateOf(proxy.IPv4, svc("web", proxy.TCP, vip4, 80, eps(srvIP4, ports...)...)))
	sync(t, p, big, proxy.PartialSync)
	for _, name := range []string{mapServices, mapBackends} {
		pinned, err := ebpf.LoadPinnedMap(filepath.Join(p.dir, name), nil)
		must(t, err)
		if c := pinned.MaxEntries(); c != 32 || c != p.kernel.mapOf(name).MaxEntries() {
			t.Errorf("after growing, the pinned %s map holds %d entries, the loaded one %d, want 32", name, c, p.kernel.mapOf(name).MaxEntries())
		}
		pinned.Close()
	}
	if seen := servers(t, r.ask(t, "tcp", front, 60), front); len(seen) < 8 {
		t.Errorf("after growing, 60 connections reached %d endpoints (%v), want most of 10", len(seen), seen)
	}

	p.Close()
	again := r.proxier(t, proxy.IPv4)
	again.minCapacity = 4
	sync(t, again, big, proxy.RecoverySync)
	if n := again.Writes(); n != 0 {
		t.Errorf("a restart after growing wrote %d entries, want 0", n)
	}
	if left, _ := filepath.Glob(filepath.Join(p.dir, "*_grown")); len(left) != 0 {
		t.Errorf("pins left from growing: %v", left)
	}
}

// serveTen starts ten TCP servers, e0 to e9, on ports 8080 to 8089 of
// the server namespace and returns the ports.
func (r *rig) serveTen(t *testing.T) []uint16 {
	names := []string{"e0", "e1", "e2", "e3", "e4", "e5", "e6", "e7", "e8", "e9"}
	r.serve(t, proxy.TCP, 8080, names...)
	var ports []uint16
	for i := range names {
		ports = append(ports, 8080+uint16(i))
	}
	return ports
}

// TestKernelCanary: a pin removed behind svcproxy's back is the canary
// gone; the recovery sync loads and pins again, and translation never
// stops.
func TestKernelCanary(t *testing.T) {
	r := newRig(t)
	r.serve(t, proxy.TCP, 8081, "ep1")
	front := netip.AddrPortFrom(vip4, 80)
	st := stateOf(proxy.IPv4, svc("web", proxy.TCP, vip4, 80, eps(srvIP4, 8081)...))
	p := r.proxier(t, proxy.IPv4)
	ctx := context.Background()
	if missing, err := p.CanaryMissing(ctx); err != nil || missing {
		t.Fatalf("before the first sync: canary missing %v, %v; want false", missing, err)
	}
	sync(t, p, st, proxy.RecoverySync)
	for _, pin := range []string{"link_connect4", mapServices} {
		if missing, err := p.CanaryMissing(ctx); err != nil || missing {
			t.Fatalf("canary missing %v, %v; want false", missing, err)
		}
		must(t, os.Remove(filepath.Join(p.dir, pin)))
		if missing, err := p.CanaryMissing(ctx); err != nil || !missing {
			t.Errorf("with %s unpinned: canary missing %v, %v; want true", pin, missing, err)
		}
		servers(t, r.ask(t, "tcp", front, 2), front)
		sync(t, p, st, proxy.RecoverySync)
		if missing, err := p.CanaryMissing(ctx); err != nil || missing {
			t.Errorf("after the recovery sync: canary missing %v, %v; want false", missing, err)
		}
		servers(t, r.ask(t, "tcp", front, 2), front)
	}
}

// TestKernelNoWindow: a client connects over and over while the endpoint
// set changes under it, grows, shrinks and moves to larger maps; every
// endpoint serves throughout, so every connection must succeed.
func TestKernelNoWindow(t *testing.T) {
	r := newRig(t)
	names := []string{"e0", "e1", "e2", "e3", "e4", "e5", "e6", "e7"}
	r.serve(t, proxy.TCP, 8080, names...)
	front := netip.AddrPortFrom(vip4, 80)
	p := r.proxier(t, proxy.IPv4)
	p.minCapacity = 4
	state := func(ports ...uint16) *desired.State {
		return changed(stateOf(proxy.IPv4, svc("web", proxy.TCP, vip4, 80, eps(srvIP4, ports...)...)))
	}
	sync(t, p, state(8080), proxy.RecoverySync)

	wait := r.start(t, "tcp", front, 1500)
	sets := [][]uint16{{8080, 8081}, {8081}, {8082, 8083, 8084}, {8080}, {8080, 8081, 8082, 8083, 8084, 8085, 8086, 8087}, {8087}, {8083, 8085}}
	const syncs = 2000
	for i := range syncs {
		sync(t, p, state(sets[i%len(sets)]...), proxy.PartialSync)
		time.Sleep(500 * time.Microsecond)
	}
	replies := wait()
	failed := 0
	for i, rep := range replies {
		if rep.Err != "" {
			failed++
			t.Logf("connection %d: %s", i, rep.Err)
		}
	}
	t.Logf("%d connections during %d syncs, %d failed", len(replies), syncs, failed)
	if failed != 0 || len(replies) != 1500 {
		t.Errorf("%d of %d connections failed while the endpoints changed", failed, len(replies))
	}
}
