package ebpf

import (
	"fmt"
	"testing"

	"github.com/svcproxy/svcproxy/pkg/pipeline/desired"
	"github.com/svcproxy/svcproxy/pkg/proxy"
)

// TestStableSlots: endpoints keep their slots across changes to the others,
// so that only the slots that must change are written.
func TestStableSlots(t *testing.T) {
	web := func(ports ...uint16) *desired.State {
		return stateOf(proxy.IPv4, svc("web", proxy.TCP, vip4, 80, eps(pod, ports...)...))
	}
	slotsOf := func(c Contents) string {
		tg := c.Services[frontendKey(vip4, 80, 6)].Pod
		var out []uint16
		for s := range tg.Count {
			out = append(out, c.Backends[beKey{ID: tg.ID, Slot: s}].AddrPort().Port())
		}
		return fmt.Sprint(out)
	}
	for _, c := range []struct {
		from, to  []uint16
		slots     string
		wantWrite int
	}{
		{[]uint16{1, 3}, []uint16{1, 2, 3}, "[1 3 2]", 2},    // 2 appended, count raised
		{[]uint16{1, 2, 3}, []uint16{1, 3}, "[1 3]", 3},      // 3 moves down, count, slot 2 deleted
		{[]uint16{1, 2, 3}, []uint16{2, 3, 4}, "[4 2 3]", 1}, // 4 takes 1's slot
		{[]uint16{1, 2, 3, 4}, []uint16{3, 5}, "[3 5]", 5},   // 3 moves below the new count, 5 takes the other hole, 2 deletions
		{[]uint16{5, 6}, []uint16{5, 6}, "[5 6]", 0},         // nothing changed
		{[]uint16{1, 2}, []uint16{3, 4}, "[3 4]", 2},         // all replaced in place
	} {
		tb, _ := recorders()
		s := newStore()
		syncStore(t, s, tb, web(c.from...), proxy.FullSync)
		n := syncStore(t, s, tb, changed(web(c.to...)), proxy.PartialSync)
		want, err := dump(tb)
		if err != nil {
			t.Fatal(err)
		}
		if got := slotsOf(want); got != c.slots || n != c.wantWrite {
			t.Errorf("%v -> %v: slots %s with %d writes, want %s with %d", c.from, c.to, got, n, c.slots, c.wantWrite)
		}
	}
}
