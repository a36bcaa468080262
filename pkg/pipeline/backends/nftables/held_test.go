package nftables

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"sigs.k8s.io/knftables"

	"github.com/svcproxy/svcproxy/pkg/pipeline/desired"
	"github.com/svcproxy/svcproxy/pkg/proxy"
	"github.com/svcproxy/svcproxy/pkg/testing/proxytest"
)

// askHeld asks a new Proxier over fake which ports of st the table holds.
func askHeld(t *testing.T, fake *strictFake, st *desired.State, ownSlots int) (*Proxier, []proxy.ServicePortName) {
	t.Helper()
	p := NewWithInterface(st.Family, fakeKernel(fake))
	p.ownSlots = ownSlots
	held, err := p.HeldPorts(context.Background(), st)
	if err != nil {
		t.Fatalf("HeldPorts: %v", err)
	}
	return p, proxytest.SortedNames(held)
}

// TestHeldPortsAfterASync: every port of every shared case, in both
// families and with chains of their own, is held once a sync programmed
// it; and a FullSync right after HeldPorts sends nothing (it uses the
// read-back).
func TestHeldPortsAfterASync(t *testing.T) {
	for _, own := range []int{defaultOwnSlots, 0} {
		for _, c := range proxytest.Cases() {
			for _, family := range proxy.Families {
				t.Run(fmt.Sprintf("ownSlots=%d/%s/%s", own, c.Name, family), func(t *testing.T) {
					st := proxytest.BuildState(t, c, family)
					fake := syncFakeOwn(t, st, own)
					p, held := askHeld(t, fake, st, own)
					if want := proxytest.PortNames(st); !slices.Equal(held, want) {
						t.Errorf("held %v, want every port %v", held, want)
					}
					if s := mustSyncIn(t, p, st, proxy.FullSync); s.Operations != 0 {
						t.Errorf("the FullSync after HeldPorts sent %d operations:\n%s", s.Operations, fake.LastTransaction)
					}
				})
			}
		}
	}
}

// TestHeldPortsSeesWhatDiffers: a port whose endpoints, rules or elements
// differ from the table's is not held, the others are; endpoints in
// another order are (their slots are kept); a new port is not, and a sync
// of the held ports alone sends nothing then.
func TestHeldPortsSeesWhatDiffers(t *testing.T) {
	st, fake := syncedTable(t, "multiport", proxy.IPv4)
	all := proxytest.PortNames(st)
	one := all[0]
	for _, tc := range []struct {
		name string
		next *desired.State
		want []proxy.ServicePortName
	}{
		{"an endpoint replaced", withChange(st, one, func(sp *desired.ServicePort) {
			sp.Internal.Endpoints = replaceFirst(sp.Internal.Endpoints, netip.MustParseAddr("10.0.9.9"))
		}), all[1:]},
		{"endpoints in another order", withChange(st, one, func(sp *desired.ServicePort) {
			eps := slices.Clone(sp.Internal.Endpoints)
			slices.Reverse(eps)
			sp.Internal.Endpoints = eps
		}), all},
		{"a node port added", withChange(st, one, func(sp *desired.ServicePort) { sp.NodePort = 30999 }), all[1:]},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, held := askHeld(t, fake, tc.next, defaultOwnSlots); !slices.Equal(held, tc.want) {
				t.Errorf("held %v, want %v", held, tc.want)
			}
		})
	}

	t.Run("a rule gone behind our back", func(t *testing.T) {
		st, fake := syncedTable(t, "session affinity", proxy.IPv4)
		cut := 0
		for name, c := range fake.Table.Chains {
			if strings.HasPrefix(name, "affinity-") && len(c.Rules) > 1 {
				c.Rules = c.Rules[:len(c.Rules)-1]
				cut++
			}
		}
		if cut == 0 {
			t.Fatal("no affinity chain to damage")
		}
		if _, held := askHeld(t, fake, st, defaultOwnSlots); len(held) != 0 {
			t.Errorf("held %v with a rule of its chain gone", held)
		}
	})

	t.Run("an element deleted behind our back", func(t *testing.T) {
		_, fake := syncedTable(t, "multiport", proxy.IPv4)
		epMap := internalMap(t, fake)
		el := fake.Table.Maps[epMap].Elements[0]
		tx := fake.NewTransaction()
		tx.Delete(&knftables.Element{Map: epMap, Key: el.Key})
		if err := fake.Run(context.Background(), tx); err != nil {
			t.Fatal(err)
		}
		if _, held := askHeld(t, fake, st, defaultOwnSlots); len(held) != len(all)-1 {
			t.Errorf("held %v after one endpoint element went, want every port but one", held)
		}
	})

	t.Run("a new port", func(t *testing.T) {
		added := *st.Service(one)
		added.Name.Name = "new"
		added.ClusterIP = netip.MustParseAddr("172.30.0.199")
		next := *st
		next.Services = st.Services.With(added.Name, &added)
		p, held := askHeld(t, fake, &next, defaultOwnSlots)
		if !slices.Equal(held, all) {
			t.Fatalf("held %v, want the ports synced before %v", held, all)
		}
		if s := mustSyncIn(t, p, st, proxy.FullSync); s.Operations != 0 {
			t.Errorf("a sync of the held ports sent %d operations:\n%s", s.Operations, fake.LastTransaction)
		}
	})
}

// replaceFirst returns eps with the first endpoint's address replaced.
func replaceFirst(eps []desired.Endpoint, a netip.Addr) []desired.Endpoint {
	out := slices.Clone(eps)
	out[0].IP = a
	return out
}

// BenchmarkHeldPorts measures what HeldPorts adds to a rejected first sync
// at 10k × 10 beyond the read-back (which a recovery sync does anyway):
// rendering every port and comparing it with the store read back.
func BenchmarkHeldPorts(b *testing.B) {
	st := benchState(10000)
	cold := newStore()
	cold.tablePresent = true
	(&Proxier{store: cold}).fullClaims(st, newConfig(st))
	for _, u := range cold.diff() {
		u.kernelUnit().Done()
	}
	p := &Proxier{store: readBackFrom(cold), ownSlots: defaultOwnSlots}
	b.ReportAllocs()
	for b.Loop() {
		held, err := p.heldPorts(st)
		if err != nil || len(held) != st.Services.Len() {
			b.Fatalf("held %d of %d: %v", len(held), st.Services.Len(), err)
		}
	}
}
