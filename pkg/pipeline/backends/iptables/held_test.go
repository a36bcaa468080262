package iptables

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/svcproxy/svcproxy/pkg/kiptables"
	"github.com/svcproxy/svcproxy/pkg/pipeline/desired"
	"github.com/svcproxy/svcproxy/pkg/proxy"
	"github.com/svcproxy/svcproxy/pkg/testing/proxytest"
)

// askHeld asks a new Proxier over fake which ports of st the kernel holds.
func askHeld(t *testing.T, fake kiptables.Interface, st *desired.State) []proxy.ServicePortName {
	t.Helper()
	held, err := NewWithInterface(st.Family, fake, Options{}).HeldPorts(ctx, st)
	if err != nil {
		t.Fatalf("HeldPorts: %v", err)
	}
	return proxytest.SortedNames(held)
}

// TestHeldPortsAfterASync: every port of every shared case, in both
// families, is held once a sync programmed it, and so is every port of a
// State in large-cluster mode (no per-endpoint comments).
func TestHeldPortsAfterASync(t *testing.T) {
	for _, c := range proxytest.Cases() {
		for _, family := range proxy.Families {
			t.Run(fmt.Sprintf("%s/%s", c.Name, family), func(t *testing.T) {
				st := proxytest.BuildState(t, c, family)
				fake, _ := syncFake(t, st, Options{})
				if held, want := askHeld(t, fake, st), proxytest.PortNames(st); !slices.Equal(held, want) {
					t.Errorf("held %v, want every port %v", held, want)
				}
			})
		}
	}
	t.Run("large-cluster mode", func(t *testing.T) {
		st := bigState(2*largeClusterEndpoints/10, 10)
		fake, p := syncFake(t, st, Options{})
		if !p.cfg.largeCluster {
			t.Fatal("the State is not in large-cluster mode")
		}
		if held := askHeld(t, fake, st); len(held) != st.Services.Len() {
			t.Errorf("held %d of %d ports", len(held), st.Services.Len())
		}
	})
}

// TestHeldPortsSeesWhatDiffers: a port whose endpoints differ from the
// kernel's, or one of whose rules is gone, is not held; the others are; a
// new port is not.
func TestHeldPortsSeesWhatDiffers(t *testing.T) {
	st := upstreamState()
	all := proxytest.PortNames(st)
	one := svcName("ns4", "svc4")
	without := func(n proxy.ServicePortName) []proxy.ServicePortName {
		return slices.DeleteFunc(slices.Clone(all), func(m proxy.ServicePortName) bool { return m == n })
	}
	fake, _ := syncFake(t, st, Options{})
	if held := askHeld(t, fake, withEndpoints(st, one, "10.180.0.4:80", "10.180.0.6:80")); !slices.Equal(held, without(one)) {
		t.Errorf("an endpoint replaced: held %v, want %v", held, without(one))
	}

	added := *st.Service(one)
	added.Name.Name = "new"
	added.ClusterIP = netip.MustParseAddr("172.30.0.199")
	next := *st
	next.Services = st.Services.With(added.Name, &added)
	if held := askHeld(t, fake, &next); !slices.Equal(held, all) {
		t.Errorf("a new port: held %v, want the ports synced before %v", held, all)
	}

	// A rule of the port's own chain gone behind our back.
	svc := fake.Table(kiptables.TableNAT).Chains[namesOf(one).svc]
	if svc == nil || len(svc.Rules) < 2 {
		t.Fatalf("no %s with rules to damage", namesOf(one).svc)
	}
	deleteRule(t, fake, kiptables.TableNAT, svc.Name, svc.Rules[len(svc.Rules)-1])
	if held := askHeld(t, fake, st); !slices.Equal(held, without(one)) {
		t.Errorf("a rule of its own chain gone: held %v, want %v", held, without(one))
	}

	// A rule of the port's in a shared chain gone.
	fake, _ = syncFake(t, st, Options{})
	for _, r := range fake.Table(kiptables.TableNAT).Chains[chainServices].Rules {
		if strings.Contains(r, namesOf(one).svc) {
			deleteRule(t, fake, kiptables.TableNAT, chainServices, r)
		}
	}
	if held := askHeld(t, fake, st); !slices.Equal(held, without(one)) {
		t.Errorf("its rule in %s gone: held %v, want %v", chainServices, held, without(one))
	}
}

// deleteRule deletes rule (as the fake keeps it) from chain, as an admin
// might.
func deleteRule(t *testing.T, fake *kiptables.Fake, table kiptables.Table, chain, rule string) {
	t.Helper()
	before := len(fake.Table(table).Chains[chain].Rules)
	if err := fake.DeleteRule(ctx, table, chain, kiptables.SplitRule(rule)...); err != nil || len(fake.Table(table).Chains[chain].Rules) != before-1 {
		t.Fatalf("deleting %q from %s: %v", rule, chain, err)
	}
}
