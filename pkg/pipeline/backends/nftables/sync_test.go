package nftables

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/knftables"

	"github.com/svcproxy/svcproxy/pkg/knft"
	"github.com/svcproxy/svcproxy/pkg/pipeline/desired"
	"github.com/svcproxy/svcproxy/pkg/pipeline/model"
	"github.com/svcproxy/svcproxy/pkg/proxy"
	"github.com/svcproxy/svcproxy/pkg/testing/proxytest"
)

// caseState builds the State of a named shared case.
func caseState(t *testing.T, name string, family proxy.IPFamily) *desired.State {
	t.Helper()
	return proxytest.BuildState(t, caseNamed(t, name), family)
}

// caseNamed finds the named shared case.
func caseNamed(t *testing.T, name string) proxytest.Case {
	t.Helper()
	for _, c := range proxytest.Cases() {
		if c.Name == name {
			return c
		}
	}
	t.Fatalf("no case %q", name)
	return proxytest.Case{}
}

// mustSync syncs st in the mode the syncer would pick when only the State
// speaks (a new Proxier's first sync is a recovery, as the syncer's is).
func mustSync(t *testing.T, p *Proxier, st *desired.State) knft.Stats {
	t.Helper()
	mode := proxytest.ModeOf(st)
	if !p.programmed.Load() {
		mode = proxy.RecoverySync
	}
	return mustSyncIn(t, p, st, mode)
}

// mustSyncIn syncs st in mode, as the syncer decided it.
func mustSyncIn(t *testing.T, p *Proxier, st *desired.State, mode proxy.SyncMode) knft.Stats {
	t.Helper()
	if err := p.Sync(context.Background(), st, mode); err != nil {
		t.Fatalf("Sync (%s): %v", mode, err)
	}
	return p.last
}

// withChange returns a copy of st where edit changed one service port,
// marked as the only change.
func withChange(st *desired.State, name proxy.ServicePortName, edit func(*desired.ServicePort)) *desired.State {
	next := *st
	next.Services = st.Services
	sp := *st.Service(name)
	edit(&sp)
	next.Services = next.Services.With(name, &sp)
	next.Changed = map[proxy.ServicePortName]struct{}{name: {}}
	return &next
}

func anyService(t *testing.T, st *desired.State, withEndpoints int) proxy.ServicePortName {
	t.Helper()
	for name, sp := range st.Services.All() {
		if len(sp.Internal.Endpoints) >= withEndpoints && sp.AffinitySeconds == 0 {
			return name
		}
	}
	t.Fatalf("no service port with %d endpoints", withEndpoints)
	return proxy.ServicePortName{}
}

func TestUnchangedResyncIsEmpty(t *testing.T) {
	st := caseState(t, "externalTrafficPolicy Local with a local endpoint", proxy.IPv4)
	fake := newStrictFake(knftables.IPv4Family)
	p := NewWithInterface(proxy.IPv4, fakeKernel(fake))
	if s := mustSync(t, p, st); s.Operations == 0 {
		t.Fatal("first sync sent nothing")
	}
	partial := *st
	partial.Changed = map[proxy.ServicePortName]struct{}{}
	if s := mustSync(t, p, &partial); s.Operations != 0 {
		t.Errorf("unchanged partial sync sent %d operations", s.Operations)
	}
	full := *st
	full.Changed = nil
	if s := mustSync(t, p, &full); s.Operations != 0 {
		t.Errorf("unchanged full sync sent %d operations", s.Operations)
	}
}

func TestOneEndpointChangeIsAFewElementOps(t *testing.T) {
	st := caseState(t, "cluster IP", proxy.IPv4)
	fake := newStrictFake(knftables.IPv4Family)
	p := NewWithInterface(proxy.IPv4, fakeKernel(fake))
	mustSync(t, p, st)
	name := anyService(t, st, 1)
	next := withChange(st, name, func(sp *desired.ServicePort) {
		eps := append([]desired.Endpoint(nil), sp.Internal.Endpoints...)
		eps[len(eps)-1].Port++ // the last slot changes, the others stay
		sp.Internal.Endpoints = eps
	})
	s := mustSync(t, p, next)
	if s.Operations == 0 || s.Operations > 4 {
		t.Errorf("one endpoint change sent %d operations, want 1..4:\n%s", s.Operations, fake.LastTransaction)
	}
	if strings.Contains(fake.LastTransaction.String(), " rule ") || strings.Contains(fake.LastTransaction.String(), "flush") {
		t.Errorf("endpoint change touched rules:\n%s", fake.LastTransaction)
	}
	tr := newTracer(t, fake, next)
	sp := next.Service(name)
	got := tr.trace(proxytest.Flow{Source: proxytest.WorldOf(proxy.IPv4).LocalPod(9), Protocol: sp.Protocol, Dest: sp.ClusterIP, DestPort: sp.Port})
	if want := proxytest.Evaluate(next, proxytest.Flow{Source: proxytest.WorldOf(proxy.IPv4).LocalPod(9), Protocol: sp.Protocol, Dest: sp.ClusterIP, DestPort: sp.Port}); !got.Equal(want) {
		t.Errorf("after the change got %s, want %s", got, want)
	}
}

// syncedTable is the shared case name in family, and a strict fake
// holding what a sync of it programs.
func syncedTable(t *testing.T, name string, family proxy.IPFamily) (*desired.State, *strictFake) {
	t.Helper()
	st := caseState(t, name, family)
	fake := newStrictFake(specFor(family).family)
	mustSync(t, NewWithInterface(family, fakeKernel(fake)), st)
	return st, fake
}

func TestRestartRewritesNothing(t *testing.T) {
	for _, family := range proxy.Families {
		st, fake := syncedTable(t, "session affinity", family)
		before := fake.Dump()
		restarted := NewWithInterface(family, fakeKernel(fake))
		if s := mustSync(t, restarted, st); s.Operations != 0 {
			t.Errorf("%s: restart with unchanged state sent %d operations:\n%s", family, s.Operations, fake.LastTransaction)
		}
		if fake.Dump() != before {
			t.Errorf("%s: restart changed the table", family)
		}
	}
}

// TestHoldsRulesTellsARestart: the read-back of an empty kernel is a cold
// start, that of a table a sync programmed a restart (the app lowers
// GOGC on it).
func TestHoldsRulesTellsARestart(t *testing.T) {
	ctx := context.Background()
	fake := newStrictFake(knftables.IPv4Family)
	cold := NewWithInterface(proxy.IPv4, fakeKernel(fake))
	if cold.HoldsRules() {
		t.Fatal("holds rules before any read-back")
	}
	if err := cold.ReadBack(ctx); err != nil {
		t.Fatal(err)
	}
	if cold.HoldsRules() {
		t.Fatal("an empty kernel's read-back holds rules")
	}
	mustSync(t, cold, caseState(t, "cluster IP", proxy.IPv4))
	restarted := NewWithInterface(proxy.IPv4, fakeKernel(fake))
	if err := restarted.ReadBack(ctx); err != nil {
		t.Fatal(err)
	}
	if !restarted.HoldsRules() {
		t.Fatal("a programmed table's read-back holds no rules")
	}
}

func TestRestartRepairsOnlyWhatDiffers(t *testing.T) {
	st := caseState(t, "cluster IP", proxy.IPv4)
	fake := newStrictFake(knftables.IPv4Family)
	mustSync(t, NewWithInterface(proxy.IPv4, fakeKernel(fake)), st)
	want := fake.Dump()
	// Damage the table behind the Proxier's back: one element gone.
	tx := fake.NewTransaction()
	epMap := internalMap(t, fake)
	el := fake.Table.Maps[epMap].Elements[0]
	tx.Delete(&knftables.Element{Map: epMap, Key: el.Key})
	if err := fake.Run(context.Background(), tx); err != nil {
		t.Fatal(err)
	}
	if s := mustSync(t, NewWithInterface(proxy.IPv4, fakeKernel(fake)), st); s.Operations != 1 {
		t.Errorf("repair sent %d operations, want 1:\n%s", s.Operations, fake.LastTransaction)
	}
	if sortedDump(fake) != sortedLines(want) {
		t.Error("repaired table differs from the original")
	}
}

func TestColdStartIsSplitConsistently(t *testing.T) {
	st := caseState(t, "loadBalancerSourceRanges", proxy.IPv6)
	whole := newStrictFake(knftables.IPv6Family)
	mustSync(t, NewWithInterface(proxy.IPv6, fakeKernel(whole)), st)

	split := newStrictFake(knftables.IPv6Family)
	p := NewWithInterface(proxy.IPv6, fakeKernel(split))
	p.maxOps = 5
	s := mustSync(t, p, st)
	if s.Transactions < 5 {
		t.Errorf("cold start used %d transactions with maxOps 5", s.Transactions)
	}
	if sortedDump(split) != sortedDump(whole) {
		t.Error("split cold start programmed a different table")
	}
}

// failingNFT fails the next Run when armed.
type failingNFT struct {
	*strictFake
	fail bool
}

func (f *failingNFT) Run(ctx context.Context, tx *knftables.Transaction) error {
	if f.fail {
		f.fail = false
		return errors.New("injected failure")
	}
	return f.strictFake.Run(ctx, tx)
}

// TestFailureThenRecoverySync: after a failed sync the Proxier drops its
// record of the table and refuses a partial sync; the recovery sync the
// syncer sends after a failure reconciles everything.
func TestFailureThenRecoverySync(t *testing.T) {
	st := caseState(t, "cluster IP", proxy.IPv4)
	fake := &failingNFT{strictFake: newStrictFake(knftables.IPv4Family)}
	p := NewWithInterface(proxy.IPv4, fakeKernel(fake))
	mustSync(t, p, st)
	name := anyService(t, st, 1)
	changed := withChange(st, name, func(sp *desired.ServicePort) { sp.Internal.Endpoints = nil })
	fake.fail = true
	if err := p.Sync(context.Background(), changed, proxytest.ModeOf(changed)); err == nil {
		t.Fatal("injected failure not reported")
	}
	// The next state says nothing changed, yet the failed change must land.
	again := *changed
	again.Changed = map[proxy.ServicePortName]struct{}{}
	if err := p.Sync(context.Background(), &again, proxy.PartialSync); !errors.Is(err, proxy.ErrFullSyncNeeded) {
		t.Fatalf("partial sync after a failure: %v, want proxy.ErrFullSyncNeeded", err)
	}
	mustSyncIn(t, p, &again, proxy.RecoverySync)
	ref := newStrictFake(knftables.IPv4Family)
	mustSync(t, NewWithInterface(proxy.IPv4, fakeKernel(ref)), &again)
	if sortedDump(fake.strictFake) != sortedDump(ref) {
		t.Error("sync after a failure did not reconcile fully")
	}
}

// withoutServices returns st with every service port removed, as a partial
// sync that names them all as changed.
func withoutServices(st *desired.State) *desired.State {
	empty := *st
	empty.Services = model.PortMap[*desired.ServicePort]{}
	empty.Changed = map[proxy.ServicePortName]struct{}{}
	for name := range st.Services.All() {
		empty.Changed[name] = struct{}{}
	}
	return &empty
}

func TestServiceRemovalCleansUp(t *testing.T) {
	st := caseState(t, "session affinity", proxy.IPv4)
	fake := newStrictFake(knftables.IPv4Family)
	p := NewWithInterface(proxy.IPv4, fakeKernel(fake))
	mustSync(t, p, st)
	empty := withoutServices(st)
	mustSync(t, p, empty)
	ref := newStrictFake(knftables.IPv4Family)
	mustSync(t, NewWithInterface(proxy.IPv4, fakeKernel(ref)), empty)
	if sortedDump(fake) != sortedDump(ref) {
		t.Errorf("removing every service left objects behind:\n%s", fake.Dump())
	}
}

func TestCleanupDeletesTable(t *testing.T) {
	st := caseState(t, "cluster IP", proxy.IPv4)
	fake := newStrictFake(knftables.IPv4Family)
	p := NewWithInterface(proxy.IPv4, fakeKernel(fake))
	mustSync(t, p, st)
	if err := p.Cleanup(context.Background()); err != nil {
		t.Fatal(err)
	}
	if fake.Table != nil {
		t.Error("table still present after Cleanup")
	}
	if err := p.Cleanup(context.Background()); err != nil {
		t.Errorf("second Cleanup: %v", err)
	}
}

// internalMap returns the name of an internal endpoint map in fake.
func internalMap(t *testing.T, fake *strictFake) string {
	t.Helper()
	for name := range fake.Table.Maps {
		if strings.HasPrefix(name, "internal-endpoints-") {
			return name
		}
	}
	t.Fatal("no internal endpoint map")
	return ""
}

// sortedDump is the fake's dump with lines sorted: element order in the fake
// depends on history, not on content.
func sortedDump(f *strictFake) string { return sortedLines(f.Dump()) }

func sortedLines(s string) string {
	lines := strings.Split(s, "\n")
	slices.Sort(lines)
	return strings.Join(lines, "\n")
}

// TestRestartDeletesForeignHairpinElements: the store keys hairpin
// elements a . a by the address's bytes; a restart reads them back to the
// same keys (nothing rewritten), and an element that is no a . a (someone
// else's) keeps its spelled key and is deleted, in both families.
func TestRestartDeletesForeignHairpinElements(t *testing.T) {
	for _, family := range proxy.Families {
		st, fake := syncedTable(t, "cluster IP", family)
		want := fake.Dump()
		a, b := "10.1.2.3", "10.1.2.4"
		if family == proxy.IPv6 {
			a, b = "fd00::1", "fd00::2"
		}
		tx := fake.NewTransaction()
		tx.Add(&knftables.Element{Set: hairpinSets[0], Key: []string{a, b}})
		if err := fake.Run(context.Background(), tx); err != nil {
			t.Fatal(err)
		}
		if s := mustSync(t, NewWithInterface(family, fakeKernel(fake)), st); s.Operations != 1 {
			t.Errorf("%s: restart sent %d operations, want the foreign element's delete:\n%s", family, s.Operations, fake.LastTransaction)
		}
		if sortedDump(fake) != sortedLines(want) {
			t.Errorf("%s: restarted table differs from the original", family)
		}
	}
}

// A changed session affinity timeout reaches the kernel: the kernel keeps
// a set's timeout as it was created, so the affinity sets are added again,
// in a partial sync as in a restart's first sync.
func TestAffinityTimeoutChangeIsApplied(t *testing.T) {
	for _, family := range proxy.Families {
		st := caseState(t, "session affinity", family)
		var name proxy.ServicePortName
		for n, sp := range st.Services.All() {
			if sp.AffinitySeconds > 0 {
				name = n
			}
		}
		for _, restart := range []bool{false, true} {
			fake := newStrictFake(specFor(family).family)
			p := NewWithInterface(family, fakeKernel(fake))
			mustSync(t, p, st)
			next := withChange(st, name, func(sp *desired.ServicePort) { sp.AffinitySeconds = 42 })
			if restart {
				p = NewWithInterface(family, fakeKernel(fake))
			}
			mustSync(t, p, next)
			sets := 0
			for setName, s := range fake.Table.Sets {
				if !strings.HasPrefix(setName, "affinity-") {
					continue
				}
				sets++
				if s.Timeout == nil || *s.Timeout != 42*time.Second {
					t.Errorf("%s, restart %t: set %s has timeout %v after the change to 42s", family, restart, setName, s.Timeout)
				}
			}
			if sets == 0 {
				t.Fatalf("%s: no affinity set in the table", family)
			}
			if s := mustSync(t, NewWithInterface(family, fakeKernel(fake)), next); s.Operations != 0 {
				t.Errorf("%s, restart %t: a restart after the change sent %d operations", family, restart, s.Operations)
			}
		}
	}
}
