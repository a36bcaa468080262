package ebpf

import (
	"context"
	"net/netip"
	"testing"

	"github.com/svcproxy/svcproxy/pkg/proxy"
)

// TestKernelPrepare: Prepare attaches the programs before any State (a
// connect then meets empty maps and is not translated), and the first
// sync after it, a full one with nothing read again, grows the prepared
// maps to the State and serves it. A restart prepares by adopting the
// grown maps, and its first sync writes nothing.
func TestKernelPrepare(t *testing.T) {
	r := newRig(t)
	ports := r.serveTen(t)
	front := netip.AddrPortFrom(vip4, 80)
	st := stateOf(proxy.IPv4, svc("web", proxy.TCP, vip4, 80, eps(srvIP4, ports...)...))

	p := r.proxier(t, proxy.IPv4)
	p.minCapacity = 4
	must(t, p.Prepare(context.Background()))
	if n := len(p.kernel.links); n != len(hooks(proxy.IPv4)) {
		t.Fatalf("after Prepare %d programs are attached, want %d", n, len(hooks(proxy.IPv4)))
	}
	if got := r.ask(t, "tcp", front, 1); got[0].Server != "" {
		t.Errorf("before the first sync a connection reached %s", got[0].Server)
	}
	// Prepare read the maps back: a full sync, as the syncer asks after a
	// read ahead, is enough.
	sync(t, p, st, proxy.FullSync)
	if c := p.kernel.mapOf(mapBackends).MaxEntries(); c != 32 {
		t.Errorf("the first sync left a backend map of %d entries, want it grown to 32", c)
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
	if c := again.kernel.mapOf(mapBackends).MaxEntries(); c != 32 {
		t.Errorf("a restart prepared a backend map of %d entries, want the pinned one of 32", c)
	}
	sync(t, again, st, proxy.FullSync)
	if n := again.Writes(); n != 0 {
		t.Errorf("a prepared restart with the same State wrote %d entries, want 0", n)
	}
	servers(t, r.ask(t, "tcp", front, 4), front)
}

// TestKernelPrepareExpectedSize: on a node with no pinned maps, Prepare
// creates them at the expected size (ExpectSize) and the first sync fills
// them without growing them: the same maps and programs, each entry
// written once. An expected size that was too low still grows them at
// the first sync; one that is unknown leaves the smallest. A restart
// adopts the pinned maps without asking, and writes nothing.
func TestKernelPrepareExpectedSize(t *testing.T) {
	r := newRig(t)
	ports := r.serveTen(t)
	front := netip.AddrPortFrom(vip4, 80)
	st := stateOf(proxy.IPv4, svc("web", proxy.TCP, vip4, 80, eps(srvIP4, ports...)...))
	for _, tc := range []struct {
		name     string
		size     proxy.ExpectedSize
		known    bool
		prepared uint32 // the backend map's capacity after Prepare
		grows    bool
	}{
		{"expected", proxy.ExpectedSize{ServicePorts: 1, EndpointPorts: 10}, true, 32, false},
		{"too low", proxy.ExpectedSize{ServicePorts: 1, EndpointPorts: 1}, true, 4, true},
		{"unknown", proxy.ExpectedSize{}, false, 4, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := r.proxier(t, proxy.IPv4)
			p.minCapacity = 4
			asked := 0
			p.ExpectSize(func(context.Context) (proxy.ExpectedSize, bool) { asked++; return tc.size, tc.known })
			must(t, p.Prepare(context.Background()))
			if c := p.kernel.mapOf(mapBackends).MaxEntries(); asked != 1 || c != tc.prepared {
				t.Fatalf("Prepare asked the size %d times and created a backend map of %d entries, want once and %d", asked, c, tc.prepared)
			}
			prepared := p.kernel
			sync(t, p, st, proxy.FullSync)
			if grew := p.kernel != prepared; grew != tc.grows {
				t.Errorf("the first sync grew the maps: %v, want %v", grew, tc.grows)
			}
			if c := p.kernel.mapOf(mapBackends).MaxEntries(); c != 32 {
				t.Errorf("after the first sync the backend map has %d entries, want 32", c)
			}
			if n := p.Writes(); n != 12 {
				t.Errorf("the first sync wrote %d entries, want 12", n)
			}
			servers(t, r.ask(t, "tcp", front, 4), front)

			p.Close()
			again := r.proxier(t, proxy.IPv4)
			again.minCapacity = 4
			again.ExpectSize(func(context.Context) (proxy.ExpectedSize, bool) { asked++; return tc.size, tc.known })
			must(t, again.Prepare(context.Background()))
			if asked != 1 {
				t.Errorf("a restart's Prepare asked the expected size, with maps pinned")
			}
			if c := again.kernel.mapOf(mapBackends).MaxEntries(); c != 32 {
				t.Errorf("a restart prepared a backend map of %d entries, want the pinned one of 32", c)
			}
			sync(t, again, st, proxy.FullSync)
			if n := again.Writes(); n != 0 {
				t.Errorf("a prepared restart with the same State wrote %d entries, want 0", n)
			}
		})
	}
}
