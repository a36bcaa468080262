package nodeport

import (
	"context"
	"net/netip"
	"testing"

	"github.com/svcproxy/svcproxy/pkg/kconntrack"
	"github.com/svcproxy/svcproxy/pkg/proxy"
)

// TestKernelFlowsListAndDelete: a UDP flow the programs translated is
// listed as the conntrack cleanup reads flows (the client's tuple, the
// endpoint answering); it keeps its endpoint after the endpoint left the
// State, until it is deleted, both directions, and counted; the client's
// next datagram from the same port then reaches the current endpoint. In
// either family: the cleanup runs per family.
func TestKernelFlowsListAndDelete(t *testing.T) {
	for _, family := range []proxy.IPFamily{proxy.IPv4, proxy.IPv6} {
		t.Run(string(family), func(t *testing.T) { testFlowsListAndDelete(t, family) })
	}
}

func testFlowsListAndDelete(t *testing.T, family proxy.IPFamily) {
	r := newRig(t)
	node, clientIP, st, entries := r.node1.IPv4, r.clientIP, stateOf, ctEntries
	a, b := r.ep(r.podA), r.ep(r.podB)
	if family == proxy.IPv6 {
		node, clientIP, st, entries = r.node1.IPv6, r.clientIP6, stateOf6, ctEntries6
		a, b = ep(r.podA.IPv6, 8080), ep(r.podB.IPv6, 8080)
	}
	p := r.proxier(t, "np")
	dst := netip.AddrPortFrom(node, 30080)
	r.sync(t, p, st(node, port("web", proxy.UDP, 30080, a)), proxy.RecoverySync)
	client := r.client
	client.SourcePort = 40123
	ask := func() string {
		t.Helper()
		ans, err := client.Ask(proxy.UDP, dst)
		must(t, err)
		return ans.Server
	}
	if got := ask(); got != "pod-a" {
		t.Fatalf("first datagram answered by %s, want pod-a", got)
	}
	flows := r.list(t, p.Flows(), family)
	want := kconntrack.Flow{Proto: 17,
		Orig:  kconntrack.Tuple{Src: netip.AddrPortFrom(clientIP, 40123), Dst: dst},
		Reply: kconntrack.Tuple{Src: a.AddrPort(), Dst: netip.AddrPortFrom(clientIP, 40123)}, Replied: true}
	if len(flows) != 1 || flows[0] != want {
		t.Fatalf("flows %v, want [%v]", flows, want)
	}

	r.sync(t, p, st(node, port("web", proxy.UDP, 30080, b)), proxy.FullSync)
	if got := ask(); got != "pod-a" {
		t.Errorf("with its entry in place the flow went to %s, want pod-a still (a stale flow)", got)
	}
	var gone int
	must(t, r.node1.NS.Do(func() (err error) {
		gone, err = p.Flows().Delete(context.Background(), family, flows)
		return err
	}))
	if gone != 1 || entries(t, p) != 0 || p.Flows().Deleted(family) != 1 {
		t.Errorf("Delete: %d flows gone (%d counted), %d table entries left; want 1 (1) and 0", gone, p.Flows().Deleted(family), entries(t, p))
	}
	if got := ask(); got != "pod-b" {
		t.Errorf("after the delete the flow went to %s, want pod-b", got)
	}
	if flows := r.list(t, p.Flows(), family); len(flows) != 1 || flows[0].Reply.Src != b.AddrPort() {
		t.Errorf("flows %v, want one answered by %v", flows, b.AddrPort())
	}
}

func (r *rig) list(t *testing.T, f *Flows, family proxy.IPFamily) []kconntrack.Flow {
	t.Helper()
	var out []kconntrack.Flow
	must(t, f.List(context.Background(), family, func(fl kconntrack.Flow) { out = append(out, fl) }))
	return out
}
