package ebpf

import (
	"maps"
	"net/netip"
	"testing"

	"github.com/svcproxy/svcproxy/pkg/pipeline/desired"
	"github.com/svcproxy/svcproxy/pkg/proxy"
)

// TestPartialSync renders only the changed ports and must leave the maps
// exactly as a full render of the new State would, writing only the
// changed ports' entries.
func TestPartialSync(t *testing.T) {
	vip := func(i byte) netip.Addr { return netip.AddrFrom4([4]byte{172, 30, 0, i}) }
	a := svc("a", proxy.TCP, vip(1), 80, eps(pod, 1, 2)...)
	b := svc("b", proxy.TCP, vip(2), 80, eps(pod, 1, 2, 3)...)
	c := svc("c", proxy.UDP, vip(3), 53, eps(pod, 53)...)
	tb, log := recorders()
	s := newStore()
	syncStore(t, s, tb, stateOf(proxy.IPv4, a, b, c), proxy.FullSync)

	// b loses an endpoint, c goes, d comes.
	b2 := svc("b", proxy.TCP, vip(2), 80, eps(pod, 1, 3)...)
	d := svc("d", proxy.TCP, vip(4), 80, eps(pod, 4)...)
	st := stateOf(proxy.IPv4, a, b2, d)
	st.Changed = map[proxy.ServicePortName]struct{}{b.Name: {}, c.Name: {}, d.Name: {}}
	*log = nil
	n := syncStore(t, s, tb, st, proxy.PartialSync)

	// b: slot 1 rewritten, its count, slot 2 deleted; c: its record, its
	// cluster IP's any-port record and its slot; d: the same, written.
	if n != 9 {
		t.Errorf("partial sync wrote %d entries (%v), want 9", n, *log)
	}
	want := Render(st)
	got, _ := dump(tb)
	if !maps.Equal(got.Services, want.Services) || !maps.Equal(got.Backends, want.Backends) {
		t.Errorf("after the partial sync the maps hold\n%v\n%v\nwant a full render's\n%v\n%v", got.Services, got.Backends, want.Services, want.Backends)
	}
	if s.records.KernelLen() != len(want.Services) || s.slots.KernelLen() != len(want.Backends) {
		t.Error("the store's record differs from the maps after the partial sync")
	}
	if _, ok := s.ids[c.Name]; ok || len(s.ids) != 3 {
		t.Errorf("group IDs after the partial sync: %v, want a, b and d's", s.ids)
	}
}

// TestPartialSyncSharedClusterIP: the any-port record of a cluster IP stays
// while one of its ports remains, and goes with the last.
func TestPartialSyncSharedClusterIP(t *testing.T) {
	http := svc("web", proxy.TCP, vip4, 80, eps(pod, 80)...)
	https := svc("web", proxy.TCP, vip4, 443, eps(pod, 443)...)
	https.Name.Port = "https"
	tb, _ := recorders()
	s := newStore()
	syncStore(t, s, tb, stateOf(proxy.IPv4, http, https), proxy.FullSync)
	for _, st := range []*desired.State{stateOf(proxy.IPv4, http), stateOf(proxy.IPv4)} {
		st.Changed = map[proxy.ServicePortName]struct{}{http.Name: {}, https.Name: {}}
		syncStore(t, s, tb, st, proxy.PartialSync)
		got, _ := dump(tb)
		want := Render(st)
		if !maps.Equal(got.Services, want.Services) {
			t.Errorf("with %d ports left the maps hold %v, want %v", st.Services.Len(), got.Services, want.Services)
		}
	}
}

// dump is what tb's maps hold.
func dump(tb tables) (Contents, error) {
	s, err := tb.services.dump()
	if err != nil {
		return Contents{}, err
	}
	b, err := tb.backends.dump()
	return Contents{Services: s, Backends: b}, err
}
