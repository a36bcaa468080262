package ebpf

import (
	"maps"
	"net/netip"
	"testing"

	"github.com/svcproxy/svcproxy/pkg/pipeline/desired"
	"github.com/svcproxy/svcproxy/pkg/pipeline/reconcile"
	"github.com/svcproxy/svcproxy/pkg/proxy"
)

// TestFullSyncRendersOnlyWhatChanged: a FullSync after a successful sync
// renders and claims again only the ports that differ from the last
// synced State (a full sync with nothing changed renders none and writes
// nothing), unless the maps are to be read back or the node port
// addresses changed; either way it writes what rendering and claiming
// every port writes (a second store, ref, does that) and the maps end as
// a full render of the State would leave them.
func TestFullSyncRendersOnlyWhatChanged(t *testing.T) {
	tb, _ := recorders()
	s := newStore()
	refTables, _ := recorders()
	ref := newStore()
	// Each State is built afresh, as a full sync's Compute from scratch
	// builds new ports: equal ports, not the same pointers.
	build := func(cEndpoints []uint16, nodePorts ...netip.Addr) *desired.State {
		var sps []*desired.ServicePort
		for i, name := range []string{"a", "b", "c"} {
			ports := []uint16{1, 2}
			if name == "c" {
				ports = cEndpoints
			}
			sp := svc(name, proxy.TCP, netip.AddrFrom4([4]byte{172, 30, 0, byte(i + 1)}), 80, eps(pod, ports...)...)
			sp.NodePort = 30000 + uint16(i)
			sps = append(sps, sp)
		}
		st := stateOf(proxy.IPv4, sps...)
		st.NodePorts.IPs = nodePorts
		return st
	}
	node := netip.MustParseAddr("192.0.2.10")
	syncStore(t, s, tb, build([]uint16{1, 2}, node), proxy.RecoverySync)
	syncStore(t, ref, refTables, build([]uint16{1, 2}, node), proxy.RecoverySync)

	for _, c := range []struct {
		name     string
		st       *desired.State
		full     bool
		rendered int
	}{
		{"nothing changed", build([]uint16{1, 2}, node), false, 0},
		{"one port changed", build([]uint16{1, 2, 3}, node), false, 1},
		{"node port addresses changed", build([]uint16{1, 2, 3}, netip.MustParseAddr("192.0.2.11")), true, 3},
	} {
		plan, err := s.syncs.Begin(proxy.FullSync, "test")
		if err != nil {
			t.Fatal(err)
		}
		full, changed := s.scope(c.st, plan)
		if full != c.full || (!full && len(changed) != c.rendered) {
			t.Errorf("%s: scope is full %v with %d ports, want full %v with %d", c.name, full, len(changed), c.full, c.rendered)
		}
		s.claim(s.render(c.st, full, changed), full)
		n, err := s.write(tb)
		if err != nil {
			t.Fatal(err)
		}
		s.prev = c.st
		ref.claim(ref.render(c.st, true, nil), true)
		all, err := ref.write(refTables)
		if err != nil {
			t.Fatal(err)
		}
		if n != all || (c.name == "nothing changed" && n != 0) {
			t.Errorf("%s: the full sync wrote %d entries, rendering every port %d", c.name, n, all)
		}
		got, _ := dump(tb)
		want := Render(c.st)
		if !maps.Equal(got.Services, want.Services) || !maps.Equal(got.Backends, want.Backends) {
			t.Errorf("%s: the maps hold %v %v, want a full render's %v %v", c.name, got.Services, got.Backends, want.Services, want.Backends)
		}
	}

	// A sync that reads the maps back renders everything.
	s.syncs.Failed()
	if full, _ := s.scope(build([]uint16{1, 2}, node), reconcile.Plan{Full: true, ReadBack: true}); !full {
		t.Error("a full sync that reads the maps back does not render every port")
	}
}
