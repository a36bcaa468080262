package proxytest

import (
	"net/netip"
	"testing"

	"github.com/svcproxy/svcproxy/pkg/proxy"
)

// TestCasesShape guards the tables (Cases and DSRCases): enough flows, unique names, both
// families exercised, and every case producing a State with services.
func TestCasesShape(t *testing.T) {
	names := map[string]bool{}
	perFamily := map[proxy.IPFamily]int{}
	for _, c := range append(Cases(), DSRCases()...) {
		if names[c.Name] {
			t.Errorf("duplicate case name %q", c.Name)
		}
		names[c.Name] = true
		flowNames := map[string]bool{}
		for _, f := range c.Flows {
			if flowNames[f.Name] {
				t.Errorf("case %q: duplicate flow name %q", c.Name, f.Name)
			}
			flowNames[f.Name] = true
			perFamily[proxy.FamilyOf(f.Dest)]++
		}
		for _, family := range proxy.Families {
			if BuildState(t, c, family).Services.Len() == 0 {
				t.Errorf("case %q: no %s service ports", c.Name, family)
			}
		}
	}
	total := perFamily[proxy.IPv4] + perFamily[proxy.IPv6]
	t.Logf("%d cases, %d flows (%d IPv4, %d IPv6)", len(names), total, perFamily[proxy.IPv4], perFamily[proxy.IPv6])
	if total < 60 || perFamily[proxy.IPv4] == 0 || perFamily[proxy.IPv6] == 0 {
		t.Errorf("want at least 60 flows over both families, got %v", perFamily)
	}
}

// A tracer that tunnels reports its tunnelled branches' endpoints; the
// masquerade of the result is the other branches'.
func TestCombineOutcomesTunneled(t *testing.T) {
	a, b := netip.MustParseAddrPort("10.0.2.2:8080"), netip.MustParseAddrPort("10.0.1.1:8080")
	got := CombineOutcomes([]Outcome{{Verdict: DNAT, Endpoint: a, Tunneled: true}, {Verdict: DNAT, Endpoint: b, Masquerade: true},
		{Verdict: DNAT, Endpoint: a, Tunneled: true}})
	want := Result{Verdict: DNAT, Endpoints: EPs("10.0.1.1:8080", "10.0.2.2:8080"), Masquerade: true, Tunneled: EPs("10.0.2.2:8080")}
	if !got.Equal(want) {
		t.Errorf("got %s, want %s", got, want)
	}
	if all := CombineOutcomes([]Outcome{{Verdict: DNAT, Endpoint: a, Tunneled: true}}); all.Masquerade || len(all.Tunneled) != 1 {
		t.Errorf("only a tunnelled branch: got %s", all)
	}
}
