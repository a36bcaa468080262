package proxy

import (
	"strings"
	"testing"
)

// TestParseBalancing: every algorithm parses back from its name, in any
// case and with spaces around; anything else, "" included, is an error
// naming the valid names, so an operator or a Service owner sees them.
func TestParseBalancing(t *testing.T) {
	for _, b := range Balancings {
		for _, s := range []string{b.String(), " " + strings.ToUpper(b.String()) + " "} {
			if got, err := ParseBalancing(s); got != b || err != nil {
				t.Errorf("ParseBalancing(%q) = %q, %v; want %q", s, got, err, b)
			}
		}
	}
	for _, s := range []string{"", "default", "ring-hash", "maglev,random"} {
		if _, err := ParseBalancing(s); err == nil || !strings.Contains(err.Error(), "[random maglev]") {
			t.Errorf("ParseBalancing(%q): err %v, want one naming [random maglev]", s, err)
		}
	}
	if BalanceDefault.String() != "" {
		t.Errorf("BalanceDefault names itself %q", BalanceDefault.String())
	}
}
