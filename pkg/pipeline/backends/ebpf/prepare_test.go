package ebpf

import (
	"context"
	"net/netip"
	"testing"

	"github.com/svcproxy/svcproxy/pkg/proxy"
)

// TestKernelPrepare: on a node with no pinned maps Prepare loads nothing
// (no size is known yet), and the first sync after it, a full one with
// nothing read again, loads the programs once, with maps of the State's
// size, and serves it. A restart prepares by adopting those maps and
// attaching the programs before any State (connections stay translated
// meanwhile), and its first sync writes nothing.
func TestKernelPrepare(t *testing.T) {
	r := newRig(t)
	ports := r.serveTen(t)
	front := netip.AddrPortFrom(vip4, 80)
	st := stateOf(proxy.IPv4, svc("web", proxy.TCP, vip4, 80, eps(srvIP4, ports...)...))

	p := r.proxier(t, proxy.IPv4)
	p.minCapacity = 4
	must(t, p.Prepare(context.Background()))
	if p.kernel != nil || p.loads != 0 {
		t.Fatalf("Prepare with no pinned maps loaded the programs %d times, want none", p.loads)
	}
	// Prepare stands for the read-back: a full sync, as the syncer asks
	// after a read ahead, is enough.
	sync(t, p, st, proxy.FullSync)
	if c := p.kernel.mapOf(mapBackends).MaxEntries(); c != 32 {
		t.Errorf("the first sync created a backend map of %d entries, want 32", c)
	}
	if p.loads != 1 {
		t.Errorf("a cold start loaded the programs %d times, want once", p.loads)
	}
	// 10 slots, the port's record and the cluster IP's any-port record.
	if n := p.Writes(); n != 12 {
		t.Errorf("the first sync wrote %d entries, want 12", n)
	}
	if seen := servers(t, r.ask(t, "tcp", front, 60), front); len(seen) < 8 {
		t.Errorf("60 connections reached %d endpoints (%v), want most of 10", len(seen), seen)
	}

	p.Close()
	again := r.proxier(t, proxy.IPv4)
	again.minCapacity = 4
	must(t, again.Prepare(context.Background()))
	if n := len(again.kernel.links); n != len(hooks(proxy.IPv4)) {
		t.Fatalf("after a restart's Prepare %d programs are attached, want %d", n, len(hooks(proxy.IPv4)))
	}
	if c := again.kernel.mapOf(mapBackends).MaxEntries(); c != 32 {
		t.Errorf("a restart prepared a backend map of %d entries, want the pinned one of 32", c)
	}
	servers(t, r.ask(t, "tcp", front, 4), front)
	sync(t, again, st, proxy.FullSync)
	if n := again.Writes(); n != 0 {
		t.Errorf("a prepared restart with the same State wrote %d entries, want 0", n)
	}
	servers(t, r.ask(t, "tcp", front, 4), front)
}
