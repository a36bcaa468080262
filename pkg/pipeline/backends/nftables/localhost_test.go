package nftables

import (
	"context"
	"errors"
	"maps"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"sigs.k8s.io/knftables"

	"github.com/svcproxy/svcproxy/pkg/pipeline/desired"
	"github.com/svcproxy/svcproxy/pkg/proxy"
	"github.com/svcproxy/svcproxy/pkg/testing/proxytest"
)

// localhostState is a world with TCP, UDP and SCTP node ports (the cases
// "localhost node ports" and "UDP and SCTP" together), nodePortAddresses
// "localhost" plus the node's addresses.
func localhostState(t *testing.T, family proxy.IPFamily) *desired.State {
	t.Helper()
	merged := proxytest.Case{Name: "localhost node ports, every protocol"}
	for _, c := range proxytest.Cases() {
		switch c.Name {
		case "localhost node ports":
			merged.Options = c.Options
			fallthrough
		case "UDP and SCTP":
			merged.Services = append(merged.Services, c.Services...)
			merged.Slices = append(merged.Slices, c.Slices...)
		}
	}
	return proxytest.BuildState(t, merged, family)
}

// withLocalhost is st with the localhost decision replaced by mode (a
// shallow copy: desired decides it from the options; here the renderer is
// under test, given each decision).
func withLocalhost(st *desired.State, mode desired.LocalhostNodePorts) *desired.State {
	out := *st
	out.NodePorts.Localhost = mode
	return &out
}

func syncLocalhost(t *testing.T, st *desired.State, mode desired.LocalhostNodePorts) *strictFake {
	t.Helper()
	fake := newStrictFake(specFor(st.Family).family)
	p := NewWithInterface(st.Family, fakeKernel(fake))
	mustSync(t, p, withLocalhost(st, mode))
	return fake
}

// TestLocalhostGolden keeps the full table of the gate's two modes in
// testdata; with the gate off the table is the one TestGolden keeps for
// the case "localhost node ports" (no localhost object at all).
func TestLocalhostGolden(t *testing.T) {
	for _, family := range proxy.Families {
		for mode, suffix := range map[desired.LocalhostNodePorts]string{desired.LocalhostReject: "reject", desired.LocalhostProxied: "proxied"} {
			file := "localhost-nodeports-" + suffix + "-" + strings.ToLower(string(family)) + ".golden"
			t.Run(file, func(t *testing.T) {
				got := syncLocalhost(t, localhostState(t, family), mode).Dump()
				proxytest.CheckGolden(t, filepath.Join("testdata", file), got, *update)
			})
		}
	}
}

// TestLocalhostObjects checks, per mode, which protocols' node ports are
// in the reject map, which reject chains and counters exist, and that
// filter-input reads the map for loopback destinations only.
func TestLocalhostObjects(t *testing.T) {
	for _, tc := range []struct {
		mode   desired.LocalhostNodePorts
		protos []string
	}{
		{desired.LocalhostOff, nil},
		{desired.LocalhostReject, []string{"sctp", "tcp", "udp"}},
		{desired.LocalhostProxied, []string{"sctp", "udp"}},
	} {
		for _, family := range proxy.Families {
			st := localhostState(t, family)
			table := syncLocalhost(t, st, tc.mode).Table
			if got := rejectedProtocols(t, table, st); !slices.Equal(got, tc.protos) {
				t.Errorf("%s mode %d: node ports rejected for %v, want %v", family, tc.mode, got, tc.protos)
			}
			for _, proto := range []string{"tcp", "udp", "sctp"} {
				want := slices.Contains(tc.protos, proto)
				_, chain := table.Chains[localhostRejectChain+proto]
				_, counter := table.Counters[localhostRejectCount+proto]
				if chain != want || counter != want {
					t.Errorf("%s mode %d %s: chain %v counter %v, want %v", family, tc.mode, proto, chain, counter, want)
				}
			}
			input := table.Chains[chainFilterInput].Rules
			if (len(input) == 1) != (tc.mode != desired.LocalhostOff) {
				t.Fatalf("%s mode %d: filter-input has %d rules", family, tc.mode, len(input))
			}
			if len(input) == 1 && !strings.Contains(input[0].Rule, "daddr "+specFor(family).loopback+" ") {
				t.Errorf("%s: filter-input rule %q does not match loopback destinations", family, input[0].Rule)
			}
		}
	}
}

// rejectedProtocols lists the protocols whose node ports are in the
// reject map, checking that each element sends its port to its
// protocol's chain.
func rejectedProtocols(t *testing.T, table *knftables.FakeTable, st *desired.State) []string {
	t.Helper()
	m := table.Maps[mapLocalhostReject]
	if m == nil {
		return nil
	}
	var out []string
	for _, sp := range st.Services.All() {
		if sp.NodePort == 0 {
			continue
		}
		key := []string{protoName(sp.Protocol), itoa(sp.NodePort)}
		el := m.FindElement(key...)
		if el == nil {
			continue
		}
		if want := "goto " + LocalhostRejectChain(sp.Protocol); strings.Join(el.Value, " ") != want {
			t.Errorf("%v → %v, want %s", key, el.Value, want)
		}
		out = append(out, protoName(sp.Protocol))
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// TestLocalhostDNATRefused: nftables cannot DNAT node ports on loopback
// (the packet keeps its loopback source); a State that decides so fails
// the sync instead of being rendered some other way.
func TestLocalhostDNATRefused(t *testing.T) {
	for _, family := range proxy.Families {
		st := withLocalhost(localhostState(t, family), desired.LocalhostDNAT)
		st.NodePorts.IPs = append(slices.Clone(st.NodePorts.IPs), proxytest.WorldOf(family).Loopback)
		p := NewWithInterface(family, fakeKernel(newStrictFake(specFor(family).family)))
		if err := p.Sync(context.Background(), st, proxy.RecoverySync); err == nil {
			t.Errorf("%s: a State with localhost node ports DNATed synced", family)
		}
	}
}

// TestLocalhostModeChangeCleansUp: a restart with another mode (the gate
// turned off, or the proxy now serving TCP) removes the chains and
// counters no longer used, and keeps a remaining counter's value.
func TestLocalhostModeChangeCleansUp(t *testing.T) {
	st := localhostState(t, proxy.IPv4)
	fake := syncLocalhost(t, st, desired.LocalhostReject)
	packets := uint64(7)
	fake.Table.Counters[localhostRejectCount+"udp"].Packets = &packets
	for _, tc := range []struct {
		mode   desired.LocalhostNodePorts
		chains []string
	}{
		{desired.LocalhostProxied, []string{"sctp", "udp"}},
		{desired.LocalhostOff, nil},
	} {
		p := NewWithInterface(proxy.IPv4, fakeKernel(fake)) // a restart: reads the table back
		mustSync(t, p, withLocalhost(st, tc.mode))
		var chains, counters []string
		for name := range fake.Table.Chains {
			if proto, ok := strings.CutPrefix(name, localhostRejectChain); ok && proto != "ports" {
				chains = append(chains, proto)
			}
		}
		for name := range fake.Table.Counters {
			counters = append(counters, strings.TrimPrefix(name, localhostRejectCount))
		}
		slices.Sort(chains)
		slices.Sort(counters)
		if !slices.Equal(chains, tc.chains) || !slices.Equal(counters, tc.chains) {
			t.Errorf("mode %d: chains %v, counters %v, want %v", tc.mode, chains, counters, tc.chains)
		}
		if _, ok := fake.Table.Maps[mapLocalhostReject]; ok != (tc.mode != desired.LocalhostOff) {
			t.Errorf("mode %d: map %s present = %v", tc.mode, mapLocalhostReject, ok)
		}
		if c := fake.Table.Counters[localhostRejectCount+"udp"]; c != nil && (c.Packets == nil || *c.Packets != packets) {
			t.Errorf("mode %d: the UDP counter lost its value", tc.mode)
		}
	}
}

// TestRejectCounters reads the counters back as the metric does.
func TestRejectCounters(t *testing.T) {
	fakes := map[proxy.IPFamily]knftables.Interface{}
	for _, family := range proxy.Families {
		fake := syncLocalhost(t, localhostState(t, family), desired.LocalhostReject)
		// The Fake, unlike nft, keeps no packet count until one is set.
		for i, proto := range []string{"tcp", "udp", "sctp"} {
			n := uint64(2 + i)
			fake.Table.Counters[localhostRejectCount+proto].Packets = &n
		}
		fakes[family] = fake
	}
	fakes[proxy.IPv6] = unreadable{fakes[proxy.IPv6]}
	got := NewRejectCountersWithInterface(fakes).RejectedPackets()
	want := map[string]map[string]uint64{"IPv4": {"TCP": 2, "UDP": 3, "SCTP": 4}}
	if !maps.EqualFunc(got, want, maps.Equal) {
		t.Errorf("RejectedPackets() = %v, want %v (IPv6 unreadable)", got, want)
	}
}

// unreadable is a table whose counters cannot be listed.
type unreadable struct{ knftables.Interface }

func (unreadable) ListCounters(context.Context) ([]*knftables.Counter, error) {
	return nil, errors.New("nft: cannot list counters")
}
