package ebpf

import (
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"testing"

	"github.com/svcproxy/svcproxy/pkg/pipeline/desired"
	"github.com/svcproxy/svcproxy/pkg/proxy"
)

// recorder is a table that keeps its contents and logs every operation
// into a log shared by the tables of one test.
type recorder[K, V comparable] struct {
	name string
	m    map[K]V
	log  *[]string
	// failAfter, when set, makes a put stop with an error after writing
	// that many entries, as a batch the kernel refused partway.
	failAfter *int
}

func (r *recorder[K, V]) Put(keys []K, vals []V) error {
	for i, k := range keys {
		if r.failAfter != nil && i == *r.failAfter {
			return errors.New("refused")
		}
		r.m[k] = vals[i]
		*r.log = append(*r.log, fmt.Sprintf("put %s %v", r.name, k))
	}
	return nil
}

func (r *recorder[K, V]) Del(keys []K) error {
	for _, k := range keys {
		delete(r.m, k)
		*r.log = append(*r.log, fmt.Sprintf("del %s %v", r.name, k))
	}
	return nil
}

func (r *recorder[K, V]) dump() (map[K]V, error) { return maps.Clone(r.m), nil }

func recorders() (tables, *[]string) {
	log := &[]string{}
	return tables{
		services: &recorder[svcKey, svcVal]{name: "service", m: map[svcKey]svcVal{}, log: log},
		backends: &recorder[beKey, beVal]{name: "slot", m: map[beKey]beVal{}, log: log},
	}, log
}

// kinds reduces a log to the sequence of operation kinds, duplicates
// merged: "put slot", "put service", ...
func kinds(log []string) []string {
	var out []string
	for _, l := range log {
		var op, what string
		fmt.Sscan(l, &op, &what)
		if k := op + " " + what; len(out) == 0 || out[len(out)-1] != k {
			out = append(out, k)
		}
	}
	return out
}

// syncStore runs one sync of st through s over tb, as Proxier.Sync does
// without loading programs: the engine's plan for mode, the read-back,
// render, claims and the write. It returns the entries written.
func syncStore(t *testing.T, s *store, tb tables, st *desired.State, mode proxy.SyncMode) int {
	t.Helper()
	n, err := trySync(s, tb, st, mode)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// trySync is syncStore returning the sync's error.
func trySync(s *store, tb tables, st *desired.State, mode proxy.SyncMode) (int, error) {
	plan, err := s.syncs.Begin(mode, "test")
	if err != nil {
		return 0, err
	}
	if plan.ReadBack {
		if err := s.readBack(tb); err != nil {
			return 0, err
		}
	}
	full, changed := s.scope(st, plan)
	s.claim(s.render(st, full, changed), full)
	n, err := s.write(tb)
	if err == nil {
		s.prev = st
	}
	return n, err
}

// TestApplyOrder checks that no frontend ever counts a slot that is not
// written: slots are written before the record that counts them, and
// deleted after the record that counted them changes.
func TestApplyOrder(t *testing.T) {
	tb, log := recorders()
	s := newStore()
	mode := proxy.FullSync
	step := func(st *desired.State) []string {
		*log = nil
		syncStore(t, s, tb, st, mode)
		mode = proxy.PartialSync
		return kinds(*log)
	}
	web := func(ports ...uint16) *desired.State {
		return stateOf(proxy.IPv4, svc("web", proxy.TCP, vip4, 80, eps(pod, ports...)...))
	}
	for _, c := range []struct {
		ports []uint16
		want  []string
	}{
		{[]uint16{1, 2}, []string{"put slot", "put service"}},
		{[]uint16{1, 2, 3}, []string{"put slot", "put service"}},
		{[]uint16{3}, []string{"put slot", "put service", "del slot"}},
		{nil, []string{"put service", "del slot"}},
	} {
		if got := step(changed(web(c.ports...))); !slices.Equal(got, c.want) {
			t.Errorf("to endpoints %v: operations %v, want %v", c.ports, got, c.want)
		}
	}
	gone := stateOf(proxy.IPv4)
	gone.Changed = map[proxy.ServicePortName]struct{}{svc("web", proxy.TCP, vip4, 80).Name: {}}
	if got := step(gone); !slices.Equal(got, []string{"del service"}) {
		t.Errorf("removing the service: %v, want [del service]", got)
	}
}

func TestApplyWritesOnlyTheDifference(t *testing.T) {
	tb, log := recorders()
	var sps []*desired.ServicePort
	for i, name := range []string{"a", "b", "c"} {
		sps = append(sps, svc(name, proxy.TCP, netip.AddrFrom4([4]byte{172, 30, 0, byte(i + 1)}), 80, eps(pod, 1, 2)...))
	}
	st := stateOf(proxy.IPv4, sps...)
	if n := syncStore(t, newStore(), tb, st, proxy.RecoverySync); n != 12 {
		t.Fatalf("first sync: %d entries; want 12 (3 records, 3 any-port records, 6 slots)", n)
	}
	*log = nil
	if n := syncStore(t, newStore(), tb, st, proxy.RecoverySync); n != 0 || len(*log) != 0 {
		t.Errorf("the same State over a read-back (a restart): %d entries %v; want none", n, *log)
	}
}

// TestFailedWriteReadsBack: a batch refused partway leaves entries the
// store did not record, so the next partial sync is refused (the syncer
// makes it full) and the full sync reads the maps back, writes only what
// is still missing and leaves them as a full render would.
func TestFailedWriteReadsBack(t *testing.T) {
	tb, log := recorders()
	s := newStore()
	web := func(ports ...uint16) *desired.State {
		return stateOf(proxy.IPv4, svc("web", proxy.TCP, vip4, 80, eps(pod, ports...)...))
	}
	syncStore(t, s, tb, web(1), proxy.FullSync)

	one := 1
	tb.backends.(*recorder[beKey, beVal]).failAfter = &one
	if _, err := trySync(s, tb, changed(web(1, 2, 3)), proxy.PartialSync); err == nil {
		t.Fatal("the refused batch was not reported")
	}
	tb.backends.(*recorder[beKey, beVal]).failAfter = nil
	*log = nil
	st := changed(web(1, 2, 3))
	if _, err := trySync(s, tb, st, proxy.PartialSync); !errors.Is(err, proxy.ErrFullSyncNeeded) || len(*log) != 0 {
		t.Fatalf("partial sync after the failure: %v, wrote %v; want proxy.ErrFullSyncNeeded and nothing", err, *log)
	}
	// Slot 1 went in before the refusal: slot 2 and the record remain.
	if n := syncStore(t, s, tb, st, proxy.FullSync); n != 2 {
		t.Errorf("the full sync after the failure wrote %d entries %v, want 2", n, *log)
	}
	got, err := dump(tb)
	want := Render(st)
	if err != nil || !maps.Equal(got.Services, want.Services) || !maps.Equal(got.Backends, want.Backends) {
		t.Errorf("after the full sync the maps hold %v %v (%v), want a full render's %v %v",
			got.Services, got.Backends, err, want.Services, want.Backends)
	}
}
