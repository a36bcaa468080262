package ipvs

import (
	"context"
	"slices"
	"testing"

	"github.com/svcproxy/svcproxy/pkg/proxy"
)

// restoreWatcher calls seen at every iptables restore, with what the
// kernel holds at that moment.
type restoreWatcher struct {
	Iptables
	seen func()
}

func (r restoreWatcher) Restore(ctx context.Context, data ...[]byte) error {
	r.seen()
	return r.Iptables.Restore(ctx, data...)
}

// TestRulesAfterVirtualServers: the first sync writes the iptables rules
// only once the virtual servers and the addresses are in. A node leaving
// iptables mode has that mode's rules in the chains the restore rewrites
// (KUBE-SERVICES), and they serve the Services until then.
func TestRulesAfterVirtualServers(t *testing.T) {
	f := newFakes()
	a := svcPort("a", 1, w4.LocalPod(1))
	var restores int
	c := f.clients()
	c.Iptables = restoreWatcher{Iptables: f.ipt, seen: func() {
		restores++
		_, _, vs := f.ipvs.Service(vsKey(a.ClusterIP, 80))
		addrs, _ := f.link.ListAddrs(DummyLink)
		if !vs || !slices.Contains(addrs, a.ClusterIP) {
			t.Errorf("iptables restore %d before the virtual server (%v) and the address (%v)", restores, vs, addrs)
		}
	}}
	p := NewWithClients(proxy.IPv4, Options{ReapInterval: -1, Now: f.clock.Now}, c)
	mustSync(t, p, baseState(proxy.IPv4, a))
	if restores != 1 {
		t.Fatalf("%d iptables restores, want 1", restores)
	}
}
