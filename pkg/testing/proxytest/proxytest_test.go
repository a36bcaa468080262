package proxytest

import (
	"testing"

	"github.com/svcproxy/svcproxy/pkg/proxy"
)

// TestCasesShape guards the table itself: enough flows, unique names, both
// families exercised, and every case producing a State with services.
func TestCasesShape(t *testing.T) {
	names := map[string]bool{}
	perFamily := map[proxy.IPFamily]int{}
	for _, c := range Cases() {
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
