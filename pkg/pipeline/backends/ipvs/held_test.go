package ipvs

import (
	"context"
	"fmt"
	"slices"
	"testing"

	"github.com/svcproxy/svcproxy/pkg/pipeline/desired"
	"github.com/svcproxy/svcproxy/pkg/proxy"
	"github.com/svcproxy/svcproxy/pkg/testing/proxytest"
)

// askHeld asks a new Proxier over f which ports of st the kernel holds.
func askHeld(t *testing.T, f *fakes, st *desired.State) (*Proxier, []proxy.ServicePortName) {
	t.Helper()
	p := newProxier(f, st.Family, Options{})
	held, err := p.HeldPorts(context.Background(), st)
	if err != nil {
		t.Fatalf("HeldPorts: %v", err)
	}
	return p, proxytest.SortedNames(held)
}

// TestHeldPortsAfterASync: every port of every shared case, in both
// families, is held once a sync programmed it; a FullSync right after
// HeldPorts writes nothing.
func TestHeldPortsAfterASync(t *testing.T) {
	for _, c := range proxytest.Cases() {
		for _, family := range proxy.Families {
			t.Run(fmt.Sprintf("%s/%s", c.Name, family), func(t *testing.T) {
				st := proxytest.BuildState(t, c, family)
				f := newFakes()
				mustSync(t, newProxier(f, family, Options{}), st)
				p, held := askHeld(t, f, st)
				if want := proxytest.PortNames(st); !slices.Equal(held, want) {
					t.Errorf("held %v, want every port %v", held, want)
				}
				before := f.writes()
				if err := p.Sync(context.Background(), st, proxy.FullSync); err != nil {
					t.Fatal(err)
				}
				if n := f.writes() - before; n != 0 {
					t.Errorf("the FullSync after HeldPorts made %d writes", n)
				}
			})
		}
	}
}

// TestHeldPortsSeesWhatDiffers: a port whose real servers differ from the
// kernel's is not held, the others are; a new port is not, and a sync of
// the held ports alone writes nothing then.
func TestHeldPortsSeesWhatDiffers(t *testing.T) {
	a := svcPort("a", 1, w4.LocalPod(1), w4.RemotePod(1))
	b := svcPort("b", 2, w4.LocalPod(2))
	st := baseState(proxy.IPv4, a, b)
	f := newFakes()
	mustSync(t, newProxier(f, proxy.IPv4, Options{}), st)

	fewer := svcPort("a", 1, w4.LocalPod(1))
	if _, held := askHeld(t, f, changed(st, map[proxy.ServicePortName]*desired.ServicePort{a.Name: fewer})); !slices.Equal(held, []proxy.ServicePortName{b.Name}) {
		t.Errorf("a real server fewer: held %v, want only %s", held, b.Name)
	}
	more := svcPort("a", 1, w4.LocalPod(1), w4.RemotePod(1), w4.RemotePod(2))
	if _, held := askHeld(t, f, changed(st, map[proxy.ServicePortName]*desired.ServicePort{a.Name: more})); !slices.Equal(held, []proxy.ServicePortName{b.Name}) {
		t.Errorf("a real server more: held %v, want only %s", held, b.Name)
	}

	c := svcPort("c", 3, w4.LocalPod(3))
	next := changed(st, map[proxy.ServicePortName]*desired.ServicePort{c.Name: c})
	p, held := askHeld(t, f, next)
	if want := proxytest.PortNames(st); !slices.Equal(held, want) {
		t.Fatalf("a new port: held %v, want %v", held, want)
	}
	before := f.writes()
	if err := p.Sync(context.Background(), baseState(proxy.IPv4, a, b), proxy.FullSync); err != nil {
		t.Fatal(err)
	}
	if n := f.writes() - before; n != 0 {
		t.Errorf("a sync of the held ports made %d writes", n)
	}
}
