package app

import (
	"testing"

	"github.com/svcproxy/svcproxy/pkg/pipeline/model"
	"github.com/svcproxy/svcproxy/pkg/proxy"
)

func TestGCTunerLowersGOGCAfterEveryFamilysFirstSync(t *testing.T) {
	var calls []int
	g := &gcTuner{pending: map[proxy.IPFamily]bool{proxy.IPv4: true, proxy.IPv6: true},
		set: func(p int) int { calls = append(calls, p); return 100 }}
	g.afterSync(proxy.IPv4)(nil, model.Changes{})
	g.afterSync(proxy.IPv4)(nil, model.Changes{})
	if len(calls) != 0 {
		t.Fatalf("GOGC set before the IPv6 family's first sync: %v", calls)
	}
	g.afterSync(proxy.IPv6)(nil, model.Changes{})
	g.afterSync(proxy.IPv6)(nil, model.Changes{})
	g.afterSync(proxy.IPv4)(nil, model.Changes{})
	if len(calls) != 1 || calls[0] != steadyGCPercent {
		t.Fatalf("SetGCPercent calls %v, want one with %d", calls, steadyGCPercent)
	}
}

func TestGCTunerLeavesAnOperatorsGOGC(t *testing.T) {
	t.Setenv("GOGC", "200")
	g := newGCTuner([]proxy.IPFamily{proxy.IPv4})
	if g != nil {
		t.Fatal("tuner made although GOGC is set")
	}
	g.afterSync(proxy.IPv4)(nil, model.Changes{}) // a nil tuner's hooks do nothing
	if g.afterReadBack() != nil {
		t.Fatal("a nil tuner's AfterReadBack is not nil")
	}
}

func TestGCTunerLowersGOGCWhenARestartFindsRules(t *testing.T) {
	var calls []int
	g := &gcTuner{pending: map[proxy.IPFamily]bool{proxy.IPv4: true},
		set: func(p int) int { calls = append(calls, p); return 100 }}
	g.afterReadBack()(false) // a cold start: the start keeps the default
	if len(calls) != 0 {
		t.Fatalf("GOGC set on a cold start's read-back: %v", calls)
	}
	g.afterReadBack()(true)
	g.afterSync(proxy.IPv4)(nil, model.Changes{})
	if len(calls) != 1 || calls[0] != steadyGCPercent {
		t.Fatalf("SetGCPercent calls %v, want one with %d", calls, steadyGCPercent)
	}
}
