package fieldcheck

import (
	"net/netip"
	"slices"
	"testing"
)

type inner struct {
	A    string
	Addr netip.Addr
}

// opaque has no exported field (as model.PortMap): fieldcheck cannot see
// into it and must say so.
type opaque struct{ hidden map[string]int }

type sample struct {
	N          int
	In         inner
	IPs        []netip.Prefix
	P          *int
	M          map[string]int
	O          opaque
	unexported bool // skipped: only exported fields are checked
}

// complete compares every exported field; forgetful leaves out In.Addr and P.
func complete(a, b sample) bool {
	_ = a.unexported
	return a.N == b.N && a.In == b.In && slices.Equal(a.IPs, b.IPs) && a.P == b.P && len(a.M) == len(b.M) &&
		len(a.O.hidden) == len(b.O.hidden)
}

func forgetful(a, b sample) bool {
	return a.N == b.N && a.In.A == b.In.A && slices.Equal(a.IPs, b.IPs)
}

func TestUncompared(t *testing.T) {
	if got := Uncompared(complete); !slices.Equal(got, []string{"M (cannot change)", "O (cannot change)"}) {
		t.Errorf("complete comparison: %v, want only the map and the opaque struct reported as unchangeable", got)
	}
	want := []string{"In.Addr", "M (cannot change)", "O (cannot change)", "P"}
	if got := Uncompared(forgetful); !slices.Equal(got, want) {
		t.Errorf("forgetful comparison: %v, want %v", got, want)
	}
}
